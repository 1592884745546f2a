-- claim: promote due delayed jobs, then lease up to `count` ready jobs,
-- within the queue's and the groups' limits, round robin between groups.
--
-- KEYS[1] base        `<prefix>:{<queue>}:` — job:<id>, gready:<group>, gconf:<group>,
--                     rate, grate:<group> (sliding-window logs, rate.lua) derive from it
-- KEYS[2] meta        hash: `paused`; limits `concurrency`, `rate`, `window`,
--                     `held_until` (ms: an external limit a handler signalled);
--                     group defaults `group_concurrency`, `group_rate`, `group_window`;
--                     round-robin counters `rr`, `rr_ungrouped`
-- KEYS[3] ready       zset: ungrouped jobs, priority * 2^31 + seq
-- KEYS[4] scheduled   zset: due ms
-- KEYS[5] active      zset: lease deadline ms
-- KEYS[6] marker      zset: wake-up marker
-- KEYS[7] events      stream
-- KEYS[8] failed      zset: failed ids by expiry ms
-- KEYS[9] groups      zset: groups with ready jobs that may run, by last service
-- KEYS[10] gwait      zset: groups held back (paused, at a limit), by when to look again
-- KEYS[11] gactive    hash: group -> running jobs
--
-- ARGV[1] worker id
-- ARGV[2] count       at most this many jobs
-- ARGV[3] lease_ms    lease length
-- ARGV[4] token       random fencing token for this claim (the worker's writes must match)
-- ARGV[5] promote     at most this many due delayed jobs (and held-back groups) promoted per call
-- ARGV[6] events stream max length
-- ARGV[7] suspects    how the call treats a suspect (a job that stalled before: its
--                     worker died with it):
--                     1 (or absent): the worker runs nothing now: a suspect met first
--                       is leased alone (the call stops after it);
--                     0: the worker runs jobs: a suspect met stops the call (it, and
--                       the ids after it, stay ready);
--                     2: the worker runs each suspect isolated beside its other jobs and
--                       has room for one more: at most one is leased, and the call goes on;
--                     3: it has no room for another: suspects met are stepped over
--                       (left ready, at most SKIP_MAX per call), and the call goes on
-- ARGV[8] reply       1: the compact reply below; 0 or absent: the full reply (added
--                     within version 4: a client that does not send it is unaffected)
--
-- Returns: {now_ms, next_due_ms | -1, held 0|1, then 17 fields per claimed job:
--   id, task, data, attempts, failures, stalls, max_failures, max_stalls,
--   min_backoff, max_backoff, timeout, priority, created_at, schedule, headers,
--   checkpoint (version 4: the saved resumable state, or nil; §16.7),
--   expires_at (version 4: the deadline, or nil; a job claimed at or past it
--   must be failed unrun by the worker, §16.2)}
--   (schedule: the schedule id of a repeatable job's tick, else nil;
--   headers: the JSON text of the headers given at enqueue, else nil)
--   next_due_ms is the earliest moment something may become claimable by
--   time (a delayed job, a rate window, a held-back group), so an idle
--   worker can block until then instead of polling; -1 when nothing is due
--   or the queue is paused (resuming sets the marker). It may already be past
--   (more due jobs than `promote` takes): a worker clamps its wait to > 0.
--   held = 1 when a suspect
--   was met that this call could not take: with ARGV[7] = 0 the worker should
--   let its jobs end, then claim again alone; with 3 it need do nothing.
-- Compact reply (ARGV[8] = 1): the same three entries, then per claimed job
--   id, task, data, attempts, created_at, present (an integer), then the
--   fields of this list that the record holds, in its order; bit k - 1 of
--   present (k = 1..12) is set when the k-th is there:
--   failures, stalls, max_failures, max_stalls, min_backoff, max_backoff,
--   timeout, priority, schedule, headers, checkpoint, expires_at.
--   A field left out has its record default (§4.1) or is nil (the last four).
--
-- Effects: promoted jobs move scheduled -> ready (keeping their enqueue
-- order); groups whose hold expired go back into the rotation; claimed jobs
-- move to active with state, token, worker, started_at and attempts + 1; one
-- `active` event for the call's jobs (§11); rate-window counters and group slots counted;
-- when jobs remain ready, the marker is set so another idle worker wakes;
-- `active` is left encoded as a skiplist (speed only: §6.2).
-- Without groups, jobs are taken in ready order. With groups, one job at a
-- time from the group served least recently (ungrouped jobs count as one
-- group); a group that is paused or at its concurrency or rate limit is
-- moved to gwait and skipped.
-- An id whose record is missing, has an unknown state or non-numeric
-- counters is recorded as failed with a reason; one whose record is in
-- another known state (a stale index entry) is dropped.
-- A job with concurrency keys (ckeys, §16.5) that one of its keys holds back
-- is parked on that key instead (ckeys.lua), and the claim goes on.
-- A released suspect (`trusted`, suspect.lua) is claimed as any other job, its
-- reply's stalls 0.
-- A job that has stalled before (its worker died with it) is claimed where
-- it can take no other job down with it (ARGV[7]): alone, by a worker that
-- runs nothing else (1), or by a worker that runs it isolated, one per call
-- (2). Met by a worker that runs jobs (0), it and the jobs popped after it go
-- back, and the claim stops there; met by a worker with no room for one (3),
-- it is stepped over and stays ready, and the claim goes on.
-- Complexity: O((promote + count + 32 + SKIP_MAX) * log N).

-- @include common
-- @include record
-- @include place
-- @include rate
-- @include unpark
-- @include ckeys

local meta, ready, scheduled, active = KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local marker, events, failed = KEYS[6], KEYS[7], KEYS[8]
local groups, gwait, gactive = KEYS[9], KEYS[10], KEYS[11]
local worker, count, lease, token = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local promote_limit, maxlen, mode = tonumber(ARGV[5]), ARGV[6], ARGV[7]
if mode ~= '0' and mode ~= '2' and mode ~= '3' then mode = '1' end
local SKIP_MAX = 16  -- suspects a call in mode 3 steps over in ready order, at most
local SKIP = 'skip'  -- take's answer for a suspect stepped over
local compact = ARGV[8] == '1'
local promote_text = int_text(promote_limit)
local now = now_ms()
local now_text, lease_end = int_text(now), int_text(now + lease)
local lease, write_leases = batch('ZADD', active)  -- one ZADD active for the call's jobs
local INF = -1  -- "until an event", stored as +inf in gwait

-- `active` is kept a skiplist. Up to 128 entries Redis stores a zset as a listpack, where
-- each ZADD and ZREM of a lease scans the list: with one worker at concurrency 100 a
-- skiplist takes 7.6% off Redis's instructions per processed job (bench/README.md). A member
-- longer than zset-max-listpack-value (64 by default) makes it a skiplist: written first in
-- the call's ZADD, it converts the key (or creates it as one) before the leases go in, and
-- is removed after them, which leaves the key converted; no reader sees it (one script).
-- Checked on every call that may lease 16 or more (a worker with many slots; for a few
-- leases neither the check nor the scans cost much): the key is made anew when it empties,
-- and a restart or a slot migration loads it back as a listpack. An ACL that denies OBJECT
-- (an error table from pcall) leaves the key as Redis makes it.
-- Returns the member to remove after the leases are written, or false.
local CONVERT_FROM = 16
local function convert_active_first(n)
  if n < CONVERT_FROM then return false end
  local encoding = redis.pcall('OBJECT', 'ENCODING', active)  -- false: no key yet
  if encoding == 'skiplist' or type(encoding) == 'table' then return false end
  local converter = string.rep('~', 1025)
  lease('0', converter)
  return converter
end

local FIELDS = {'state', 'task', 'data', 'attempts', 'failures', 'stalls', 'max_failures',
                'max_stalls', 'min_backoff', 'max_backoff', 'timeout', 'priority', 'created_at',
                'schedule', 'headers', 'group', 'data2', 'data3', 'expires_at', 'ckeys',
                'checkpoint', 'trusted'}
local RETURNED = 15  -- fields 2..15 of FIELDS, then the checkpoint and expires_at (§16)
-- Returned fields a record leaves out when they hold their default, by
-- position, and the text of that default (replies carry bulk strings).
local DEFAULTED = {[5] = 'failures', [6] = 'stalls', [7] = 'max_failures', [8] = 'max_stalls',
                   [9] = 'min_backoff', [10] = 'max_backoff', [11] = 'timeout',
                   [12] = 'priority'}
for k, name in pairs(DEFAULTED) do
  DEFAULTED[k] = int_text(RECORD_DEFAULTS[name])
end
-- The record's FIELDS by position, read with one HGETALL: cheaper than an
-- HMGET of every field, most of which a record leaves out (a lookup each).
local FIELD_AT = {}
for i, name in ipairs(FIELDS) do FIELD_AT[name] = i end
-- `f` is made whole at once (false = missing): filling an empty table grows
-- and rehashes it several times.
local function fields_of(job_key)
  local all = redis.call('HGETALL', job_key)
  local f = {false, false, false, false, false, false, false, false, false, false, false,
             false, false, false, false, false, false, false, false, false, false, false}
  for i = 1, #all, 2 do
    local at = FIELD_AT[all[i]]
    if at then f[at] = all[i + 1] end
  end
  return f
end
local KNOWN_STATES = {waiting = true, delayed = true, active = true, completed = true,
                      failed = true, blocked = true, waiting_children = true}

local out = {now, -1, 0}  -- now, next due, held back by a suspect (1/0), jobs...
local next_due = nil
local function due_at(ms)
  if ms and (not next_due or ms < next_due) then next_due = ms end
end

-- Jobs due at the same moment keep their enqueue order: the ready score
-- comes from the sequence number given at enqueue, not from promotion.
local function promote()
  local due = redis.call('ZRANGEBYSCORE', scheduled, '-inf', now_text, 'LIMIT', '0', promote_text)
  for _, id in ipairs(due) do
    redis.call('ZREM', scheduled, id)
    local job_key = base .. 'job:' .. id
    local f = redis.call('HMGET', job_key, 'priority', 'seq', 'group', 'state')
    if f[4] then  -- a record without a seq (corrupt) still runs, at seq 0: never stranded
      redis.call('HSET', job_key, 'state', 'waiting')
      if f[3] and f[3] ~= '' then
        redis.call('ZADD', group_ready(f[3]), ready_score(f[1], f[2]), id)
        if not redis.call('ZSCORE', gwait, f[3]) then
          redis.call('ZADD', groups, 'NX', 0, f[3])
        end
      else
        redis.call('ZADD', ready, ready_score(f[1], f[2]), id)
      end
    end
  end
  local held = redis.call('ZRANGEBYSCORE', gwait, '-inf', now_text, 'LIMIT', '0', promote_text)
  for _, group in ipairs(held) do
    redis.call('ZREM', gwait, group)
    if redis.call('ZCARD', group_ready(group)) > 0 then
      redis.call('ZADD', groups, 'NX', 0, group)
    end
  end
end

local limits = redis.call('HMGET', meta, 'paused', 'concurrency', 'rate', 'window',
                          'group_concurrency', 'group_rate', 'group_window', 'rr_ungrouped',
                          'held_until')

-- How many jobs the queue-wide limits let this call take.
local function queue_allowance()
  local allowed = count
  local cap = tonumber(limits[2])
  if cap then
    allowed = math.min(allowed, cap - redis.call('ZCARD', active))
  end
  local held = tonumber(limits[9])  -- an external limit a handler signalled (§16.4)
  if held and held > now then
    due_at(held)
    return 0
  end
  local rate = tonumber(limits[3])
  if rate then
    local room, frees = rate_room(base .. 'rate', rate, num(limits[4], 1000), now)
    due_at(frees)
    allowed = math.min(allowed, room)
  end
  return math.max(allowed, 0)
end

-- Nil when `group` may run a job now; else when to look again (INF: on an event).
local function group_hold(group)
  local conf = redis.call('HMGET', base .. 'gconf:' .. group, 'paused', 'concurrency', 'rate',
                          'window')
  if conf[1] == '1' then return INF end
  local cap = tonumber(conf[2]) or tonumber(limits[5])
  if cap and num(redis.call('HGET', gactive, group), 0) >= cap then return INF end
  local rate = tonumber(conf[3]) or tonumber(limits[6])
  if rate then
    local window_ms = num(conf[4], num(limits[7], 1000))
    local room, frees = rate_room(base .. 'grate:' .. group, rate, window_ms, now)
    if room < 1 then return frees end
  end
  return nil
end

local function hold(group, until_ms)
  redis.call('ZREM', groups, group)
  if until_ms == INF then
    redis.call('ZADD', gwait, '+inf', group)
  else
    redis.call('ZADD', gwait, until_ms, group)
  end
end

-- A ready id whose record cannot run; keep a visible trace of it for a day.
local function fail_corrupt(id, reason)
  local job_key = base .. 'job:' .. id
  redis.call('HSET', job_key, 'state', 'failed', 'error', reason, 'finished_at', now)
  redis.call('PEXPIRE', job_key, 86400000)
  redis.call('ZADD', failed, now + 86400000, id)
  emit(events, maxlen, 'event', 'failed', 'id', id, 'error', reason)
end

local leased = 0
local claimed_ids, claimed_attempts = {}, {}
-- ids taken off a ready index: leased, parked on a concurrency key (§16.5), or dropped
-- (stale, corrupt). Once `n` are, more may be claimable: see the wake-up below.
local examined = 0
local stopped_early = false  -- by a suspect or the visit bound: others may claim on

-- Lease one id taken off a ready index; returns false when claiming must stop
-- here (a suspect met after other jobs was put back, or a suspect was leased).
-- `score` is the id's ready score when it was popped, or nil when the id is
-- still in `from` (claim_in_order removes the ids it handled after its loop).
local put_back = false  -- set when take stopped at a suspect it left for the next claim
local stepped = {}  -- suspects popped and stepped over: {key, score, id, group}, put back after
local suspects_leased = 0
local n_out = #out
local function take(id, score, from)
  local job_key = base .. 'job:' .. id
  local f = fields_of(job_key)
  local state = f[1]
  if state ~= 'waiting' then
    if not state then
      fail_corrupt(id, 'job record missing')
    elseif not KNOWN_STATES[state] then
      fail_corrupt(id, "corrupt record: unknown state '" .. state .. "'")
    end  -- else a stale index entry: dropped, record untouched
    return true
  end
  local attempts, stalls = tonumber(f[4] or '0'), tonumber(f[6] or '0')
  if not (attempts and stalls) then
    fail_corrupt(id, 'corrupt record: attempts or stalls is not a number')
    return true
  end
  if f[22] and stalls > 0 then  -- released by an operator (suspect.lua): runs as any job,
    stalls, f[6] = 0, false    -- and its reply says stalls 0 so its worker does not isolate it
  end
  local ckeys = f[20]
  if ckeys then  -- concurrency keys (§16.5): park the job while one holds it back
    local key, until_ms = ckey_hold(ckeys, now)
    if key then
      ckey_park(id, score or redis.call('ZSCORE', from, id), key, until_ms)
      if until_ms ~= CKEY_INF then due_at(until_ms) end
      return true
    end
  end
  if stalls > 0 then
    if mode == '2' and suspects_leased == 0 then
      suspects_leased = 1  -- isolated by its worker: the call goes on
    elseif mode == '2' or mode == '3' then
      out[3] = 1
      if score then stepped[#stepped + 1] = {from, score, id, f[16]} end
      return SKIP
    elseif leased > 0 or mode == '0' then
      if score then
        redis.call('ZADD', from, score, id)  -- a suspect runs alone, in the next claim
      end
      put_back = true
      out[3] = 1
      return false
    end
  end
  attempts = attempts + 1
  local attempt = int_text(attempts)
  redis.call('HSET', job_key, 'attempts', attempt, 'state', 'active', 'token', token,
             'worker', worker, 'started_at', now_text)
  lease(lease_end, id)
  -- one `active` entry for the call's jobs, added after the loop (add_for_jobs)
  claimed_ids[leased + 1], claimed_attempts[leased + 1] = id, attempt
  local group = f[16]
  if group and group ~= '' then
    redis.call('HINCRBY', gactive, group, 1)
  end
  if ckeys then ckey_take(ckeys, now) end
  local data = f[3]  -- every field was read: data3 is false when missing
  if data and f[17] then data = read_data(job_key, data, f[17], f[18] or false) end
  -- false: a nil reply, kept in place
  local o = n_out
  if compact then  -- id, task, data, attempts, created_at, present, the fields present
    out[o + 1], out[o + 2], out[o + 3], out[o + 4] = id, f[2] or false, data or false, attempts
    out[o + 5] = f[13] or false
    -- written out: a loop over a table of the 12 costs 3.5k instructions more a job
    local p, at = 0, o + 6
    if f[5] then p, at = p + 1, at + 1; out[at] = f[5] end              -- failures
    if f[6] then p, at = p + 2, at + 1; out[at] = f[6] end              -- stalls
    if f[7] then p, at = p + 4, at + 1; out[at] = f[7] end              -- max_failures
    if f[8] then p, at = p + 8, at + 1; out[at] = f[8] end              -- max_stalls
    if f[9] then p, at = p + 16, at + 1; out[at] = f[9] end             -- min_backoff
    if f[10] then p, at = p + 32, at + 1; out[at] = f[10] end           -- max_backoff
    if f[11] then p, at = p + 64, at + 1; out[at] = f[11] end           -- timeout
    if f[12] then p, at = p + 128, at + 1; out[at] = f[12] end          -- priority
    if f[14] then p, at = p + 256, at + 1; out[at] = f[14] end          -- schedule
    if f[15] then p, at = p + 512, at + 1; out[at] = f[15] end          -- headers
    if f[21] then p, at = p + 1024, at + 1; out[at] = f[21] end         -- checkpoint
    if f[19] then p, at = p + 2048, at + 1; out[at] = f[19] end         -- expires_at
    out[o + 6] = p
    n_out = at
  else
    -- the full reply's 17 fields
    out[o + 1], out[o + 2], out[o + 3], out[o + 4] = id, f[2] or false, data or false, attempts
    out[o + 5], out[o + 6] = f[5] or DEFAULTED[5], f[6] or DEFAULTED[6]
    out[o + 7], out[o + 8] = f[7] or DEFAULTED[7], f[8] or DEFAULTED[8]
    out[o + 9], out[o + 10] = f[9] or DEFAULTED[9], f[10] or DEFAULTED[10]
    out[o + 11], out[o + 12] = f[11] or DEFAULTED[11], f[12] or DEFAULTED[12]
    out[o + 13], out[o + 14], out[o + 15] = f[13] or false, f[14] or false, f[15] or false
    out[o + 16] = f[21] or false  -- checkpoint (§16.7)
    out[o + 17] = f[19] or false  -- expires_at (§16.2)
    n_out = o + 17
  end
  leased = leased + 1
  return stalls == 0 or mode == '2'
end

-- Suspects popped by the round robin and stepped over go back where they were.
local function put_back_stepped()
  for _, s in ipairs(stepped) do
    redis.call('ZADD', s[1], s[2], s[3])
    local group = s[4]
    if group and group ~= '' and not redis.call('ZSCORE', gwait, group) then
      redis.call('ZADD', groups, 'NX', redis.call('HINCRBY', meta, 'rr', 1), group)
    end
  end
end

-- No groups in play: take jobs in ready order, `n` at most. The ids are read,
-- handled, then removed by rank (ZPOPMIN would format every score as a
-- reply): one command, or one per run of ranks between suspects stepped over;
-- a suspect left for the next claim, and the ids after it, stay where they
-- are. Nothing else enters `ready` meanwhile.
local function claim_in_order(n)
  local extra = (mode == '3' or mode == '2') and SKIP_MAX or 0
  local ids = redis.call('ZRANGE', ready, '0', int_text(n - 1 + extra))
  local kept = {}  -- ranks (1-based) of suspects stepped over: they stay
  local last = 0  -- the last rank handled
  for i = 1, #ids do
    if i - #kept > n then break end
    local went = take(ids[i], nil, ready)
    if went == SKIP then
      kept[#kept + 1] = i
    elseif not went then
      stopped_early = true
      if not put_back then last = i end
      break
    end
    last = i
  end
  examined = last - #kept
  local hi = last  -- remove the runs between kept ranks, the highest first
  for k = #kept, 0, -1 do
    local lo = k > 0 and kept[k] + 1 or 1
    if hi >= lo then
      redis.call('ZREMRANGEBYRANK', ready, int_text(lo - 1), int_text(hi - 1))
    end
    if k > 0 then hi = kept[k] - 1 end
  end
end

local function pop_one(key)
  local popped = redis.call('ZPOPMIN', key, 1)
  if #popped == 0 then return nil end
  examined = examined + 1
  return popped
end

-- Groups in play: one job per turn from the group served least recently.
local function claim_round_robin(n)
  local visits = 0
  while leased < n and visits < n + 32 do
    visits = visits + 1
    local head = redis.call('ZRANGE', groups, '0', '0', 'WITHSCORES')
    local ungrouped_ready = redis.call('ZCARD', ready) > 0
    if #head == 0 and not ungrouped_ready then return end
    if ungrouped_ready and (#head == 0 or num(limits[8], 0) <= tonumber(head[2])) then
      local popped = pop_one(ready)
      local served = redis.call('HINCRBY', meta, 'rr', 1)
      redis.call('HSET', meta, 'rr_ungrouped', served)
      limits[8] = served
      if not take(popped[1], popped[2], ready) then
        stopped_early = true
        return
      end
    else
      local group = head[1]
      local until_ms = group_hold(group)
      if until_ms then
        hold(group, until_ms)
        if until_ms ~= INF then due_at(until_ms) end
      else
        local key = group_ready(group)
        local popped = pop_one(key)
        if not popped then
          redis.call('ZREM', groups, group)
        else
          local before = leased
          local go_on = take(popped[1], popped[2], key)
          if leased > before then
            local conf = redis.call('HMGET', base .. 'gconf:' .. group, 'rate', 'window')
            if tonumber(conf[1]) or tonumber(limits[6]) then
              rate_log(base .. 'grate:' .. group, 1, num(conf[2], num(limits[7], 1000)), now)
            end
          end
          if redis.call('ZCARD', key) > 0 then
            redis.call('ZADD', groups, redis.call('HINCRBY', meta, 'rr', 1), group)
          else
            redis.call('ZREM', groups, group)
          end
          if not go_on then
            stopped_early = true
            return
          end
        end
      end
    end
  end
  stopped_early = visits >= n + 32
end

local function earliest(key)
  local first = redis.call('ZRANGE', key, '0', '0', 'WITHSCORES')
  if #first > 0 and first[2] ~= 'inf' then due_at(tonumber(first[2])) end
end

if limits[1] ~= '1' then
  promote()
  -- keys whose rate held jobs back (kheld): one read per claim while none is due
  local held_key = redis.call('ZRANGE', base .. 'kheld', '0', '0', 'WITHSCORES')
  if #held_key > 0 and tonumber(held_key[2]) <= now then
    ckey_release_due(now, promote_limit, marker)
    held_key = redis.call('ZRANGE', base .. 'kheld', '0', '0', 'WITHSCORES')
  end
  if #held_key > 0 then due_at(tonumber(held_key[2])) end
  local n = queue_allowance()
  if n > 0 then
    local converter = convert_active_first(n)
    if redis.call('EXISTS', groups) == 0 then
      claim_in_order(n)
    else
      claim_round_robin(n)
    end
    put_back_stepped()
    write_leases()
    if converter then redis.call('ZREM', active, converter) end
    if leased > 0 then
      -- the call's one `active` entry: `attempt` or `attempts` in claim order (§11)
      add_for_jobs(events, 'active', claimed_ids, leased == 1 and 'attempt' or 'attempts',
                   table.concat(claimed_attempts, ' '), 'worker', worker)
      trim(events, maxlen)
    end
    if leased > 0 and tonumber(limits[3]) then
      rate_log(base .. 'rate', leased, num(limits[4], 1000), now)
    end
  end
  -- Wake another idle worker only if it could claim something now: not when
  -- a limit or held-back groups are what stopped this call. So when a claim
  -- took fewer than `count` and left the marker unset, nothing is claimable
  -- until an enqueue, a run's end or next_due: its worker may block at once.
  local more = redis.call('ZCARD', ready) > 0 or redis.call('EXISTS', groups) == 1
  if more and n >= count and (examined >= n or stopped_early) then
    wake(marker)
  end
end
-- A paused queue has no next due time: its due jobs are not promoted, so the
-- first scheduled score would already have passed and its workers would spin.
-- Resuming sets the marker instead (protocol §4.2).
if limits[1] ~= '1' then
  earliest(scheduled)
  earliest(gwait)
end
out[2] = next_due or -1
return out
