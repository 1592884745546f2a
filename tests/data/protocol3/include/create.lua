-- Creating a job record, shared by enqueue and the schedule scripts. Needs
-- `common`, `record` and `place`. `Q` is a table of the queue's keys: meta, ready,
-- scheduled, marker, events, completed, failed; and optionally `pending`, a
-- list the new waiting ungrouped jobs' (score, id) pairs are appended to,
-- for the caller to ZADD to ready at once.

-- FIFO sequence numbers count up from 2^30, LIFO ones down from it, so one
-- priority band holds both orders and every score stays exact.
local HALF = 1073741824
-- FIFO numbers are taken from the counter in blocks (SEQ_BLOCK, set by a
-- caller that creates many jobs in one call): one HINCRBY per call, not per
-- job. Gaps left by unused numbers are harmless: only the order matters.
local SEQ_BLOCK = 1
local seq_next, seq_last = 0, -1
local function next_seq(meta, lifo)
  if lifo == '1' then
    return HALF - 1 - (redis.call('HINCRBY', meta, 'lifo_seq', 1) % HALF)
  end
  if seq_next > seq_last then
    seq_last = redis.call('HINCRBY', meta, 'seq', SEQ_BLOCK)
    seq_next = seq_last - SEQ_BLOCK + 1
  end
  local seq = seq_next
  seq_next = seq_next + 1
  return HALF + (seq % HALF)
end

-- The fields of a new record (`j`: task, data, run_at, lifo, and the
-- options priority, max_failures, max_stalls, min_backoff, max_backoff,
-- timeout, result_ttl, group, schedule when set). Options equal to their
-- record default are not stored, nor run_at when it is now (= created_at),
-- nor the zero counters; data goes in pieces (`put_data`). Returns the HSET
-- arguments and the new seq.
local TEXT_FIELDS = {'group', 'req', 'idx', 'schedule'}
local function job_fields(j, state, now, meta)
  local seq = next_seq(meta, j.lifo)
  local fields = {'state', state, 'task', j.task, 'seq', seq, 'created_at', now}
  put_data(fields, j.data)
  local n = #fields
  if not j.plain then  -- a plain job (no options sent) has every option at its default
    for _, name in ipairs(RECORD_OPTIONS) do
      local value = j[name]
      if value and value ~= '' and tonumber(value) ~= RECORD_DEFAULTS[name] then
        fields[n + 1], fields[n + 2], n = name, value, n + 2
      end
    end
  end
  if tonumber(j.run_at) ~= now then
    fields[n + 1], fields[n + 2], n = 'run_at', j.run_at, n + 2
  end
  for _, name in ipairs(TEXT_FIELDS) do
    local value = j[name]
    -- a generated id needs no request id to tell a re-send: it exists only then
    if value and value ~= '' and not (name == 'req' and j.fresh) then
      fields[n + 1], fields[n + 2], n = name, value, n + 2
    end
  end
  return fields, seq
end

-- Writes the record and indexes it at once (what `place` does for a record
-- already in Redis, without reading back what was just written).
local function create_job(job_key, j, now, Q, maxlen)
  local due = tonumber(j.run_at)
  local state = due > now and 'delayed' or 'waiting'
  local fields, seq = job_fields(j, state, now, Q.meta)
  redis.call('HSET', job_key, unpack(fields))
  if j.idx and j.idx ~= '' then
    for line in string.gmatch(j.idx, '[^\n]+') do
      redis.call('ZADD', base .. 'idx:' .. line, now, j.id)
    end
  end
  -- a stale entry of an expired record with this id must not sweep the new
  -- one; an id the producer generated at random (fresh) cannot have one
  if not j.fresh then
    redis.call('ZREM', Q.completed, j.id)
    redis.call('ZREM', Q.failed, j.id)
  end
  if state == 'delayed' then
    redis.call('ZADD', Q.scheduled, due, j.id)
  elseif j.group and j.group ~= '' then
    redis.call('ZADD', group_ready(j.group), ready_score(j.priority, seq), j.id)
    enter_rotation(j.group)
  elseif Q.pending then  -- the caller adds these to ready in one ZADD
    local pending = Q.pending
    pending[#pending + 1] = ready_score(j.priority, seq)
    pending[#pending + 1] = j.id
  else
    redis.call('ZADD', Q.ready, ready_score(j.priority, seq), j.id)
  end
  if not Q.woken then  -- one wake-up per call is enough
    wake(Q.marker)
    Q.woken = true
  end
  emit(Q.events, maxlen, 'event', 'created', 'id', j.id, 'state', state)
  return state
end
