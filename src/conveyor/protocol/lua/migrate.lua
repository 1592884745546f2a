-- migrate: upgrade a queue written by protocol version 3 to version 4 in place
-- (docs/protocol.md §10), one batch of groups per call.
--
-- KEYS[1] base        `<prefix>:{<queue>}:` — rate:<window>, grate:<group>:<window> (version 3),
--                     rate, grate:<group> (version 4), gconf:<group> derive from it
-- KEYS[2] meta        hash: `version`; limits `rate`, `window`, `group_rate`, `group_window`
-- KEYS[3] workers     zset: worker ids by registration expiry ms (the roll call)
-- KEYS[4] groups      zset: groups with ready jobs
-- KEYS[5] gwait       zset: groups held back
--
-- ARGV[1] force       1: migrate even while workers answer the roll call
-- ARGV[2] cursor      position of this call's first group in `groups` then `gwait` (0 first)
-- ARGV[3] count       at most this many groups converted per call
--
-- Returns: {status, next cursor, rate windows converted, live workers, version found}
--   status: 'done' (meta version is now 4) | 'more' (call again from the next cursor)
--           | 'current' (already version 4: nothing changed)
--           | 'workers' (workers answer the roll call and force is 0: nothing changed)
--           | 'version' (the version found is neither 3 nor 4: nothing changed)
--
-- Effects: each version 3 fixed-window rate counter still counting (the queue's, then each
-- group's of this batch) becomes as many leases logged now in the version 4 sliding log and
-- is deleted (with the previous window's counter); on the last batch, `version` set to 4.
-- Job records, indexes and schedules of version 3 are read as they are by version 4.
-- Complexity: O(count * (log N + rate)).

-- @include common
-- @include rate

local base, meta, workers, groups, gwait = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local force, cursor, count = ARGV[1] == '1', tonumber(ARGV[2]), tonumber(ARGV[3])
local now = now_ms()

local found = redis.call('HGET', meta, 'version')
if found == '4' then return {'current', 0, 0, 0, found} end
if found ~= '3' then return {'version', 0, 0, 0, found or ''} end
local live = redis.call('ZCOUNT', workers, '(' .. now, '+inf')
if live > 0 and not force then return {'workers', 0, 0, live, found} end

-- A version 3 window counter (`<prefix><index>`, index = floor(now / window)) still
-- counting becomes leases logged now: the rate then holds across the upgrade.
local function convert(old_prefix, log_key, window_ms)
  local index = math.floor(now / window_ms)
  local current = old_prefix .. index
  local used = tonumber(redis.call('GET', current) or '0') or 0
  redis.call('DEL', current, old_prefix .. (index - 1))
  if used <= 0 then return 0 end
  rate_log(log_key, used, window_ms, now)
  return 1
end

local converted = 0
local limits = redis.call('HMGET', meta, 'rate', 'window', 'group_window')
if cursor == 0 and tonumber(limits[1]) then
  converted = converted + convert(base .. 'rate:', base .. 'rate', num(limits[2], 1000))
end
local ready_groups = redis.call('ZCARD', groups)
local names
if cursor < ready_groups then
  names = redis.call('ZRANGE', groups, cursor, cursor + count - 1)
else
  names = redis.call('ZRANGE', gwait, cursor - ready_groups, cursor - ready_groups + count - 1)
end
for _, group in ipairs(names) do
  local window_ms = num(redis.call('HGET', base .. 'gconf:' .. group, 'window'),
                        num(limits[3], 1000))
  converted = converted + convert(base .. 'grate:' .. group .. ':', base .. 'grate:' .. group,
                                  window_ms)
end
if #names > 0 then return {'more', cursor + #names, converted, live, found} end
redis.call('HSET', meta, 'version', '4')
return {'done', cursor, converted, live, found}
