-- limits: set the queue's limits, a group's limits, pause or resume a group.
--
-- KEYS[1] base        `<prefix>:{<queue>}:` — gconf:<group>, gready:<group> derive from it
-- KEYS[2] meta        hash: queue limits and group defaults
-- KEYS[3] groups      zset: the group rotation
-- KEYS[4] gwait       zset: held-back groups
-- KEYS[5] marker      zset: wake-up marker
--
-- ARGV[1] what: 'queue' | 'group' | 'key' | 'pause_group' | 'resume_group'
-- ARGV[2] group       ('' for 'queue'; for 'group', '' sets the defaults of every group;
--                     for 'key', the concurrency key, §16.5)
-- ARGV[3] concurrency jobs running at once (''  = no limit)
-- ARGV[4] rate        jobs started per window ('' = no limit)
-- ARGV[5] window_ms   the rate window (''  = 1000)
-- ARGV[6] max_waiting 'group' only: a cap on the group's waiting jobs ('' = none;
--                     absent = unchanged), §16.5
--
-- Returns: 1.
-- Effects: 'queue' writes meta concurrency / rate / window; 'group' writes
-- gconf:<group> (or meta group_concurrency / group_rate / group_window);
-- either way held-back groups are let back into the rotation, to be judged
-- again by the next claim. 'key' writes kconf:<key> and brings up to 1000
-- of the jobs parked on the key back (the rest through kheld: the next
-- claims). 'pause_group' sets gconf:<group> paused = 1 and
-- holds the group (gwait +inf); 'resume_group' clears it and lets the group
-- back. The marker wakes a worker. Producers may enqueue all the while.
-- Complexity: O(log N + held-back groups or parked jobs released, at most 1000).

-- @include common
-- @include place
-- @include unpark

local meta, groups, gwait, marker = KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local what, group = ARGV[1], ARGV[2]
local values = {ARGV[3], ARGV[4], ARGV[5], ARGV[6]}

local function write(key, names)
  for i, name in ipairs(names) do
    if values[i] == nil then  -- not sent (a caller of an earlier version): unchanged
    elseif values[i] == '' then
      redis.call('HDEL', key, name)
    else
      redis.call('HSET', key, name, values[i])
    end
  end
end

local function let_back(g)
  redis.call('ZREM', gwait, g)
  if redis.call('ZCARD', base .. 'gready:' .. g) > 0 then
    redis.call('ZADD', groups, 'NX', 0, g)
  end
end

local function release_held()
  for _, g in ipairs(redis.call('ZRANGE', gwait, 0, 999)) do
    if redis.call('HGET', base .. 'gconf:' .. g, 'paused') ~= '1' then
      let_back(g)
    end
  end
end

if what == 'queue' then
  write(meta, {'concurrency', 'rate', 'window'})
elseif what == 'group' and group == '' then
  write(meta, {'group_concurrency', 'group_rate', 'group_window', 'group_max_waiting'})
  release_held()
elseif what == 'group' then
  write(base .. 'gconf:' .. group, {'concurrency', 'rate', 'window', 'max_waiting'})
  if redis.call('HGET', base .. 'gconf:' .. group, 'paused') ~= '1' then
    let_back(group)
  end
elseif what == 'key' then  -- a concurrency key's limits (§16.5); its parked jobs come back
  write(base .. 'kconf:' .. group, {'concurrency', 'rate', 'window'})
  redis.call('ZREM', base .. 'kheld', group)
  ckey_unpark(group, 1000, marker)
  if redis.call('EXISTS', base .. 'kwait:' .. group) == 1 then
    redis.call('ZADD', base .. 'kheld', 0, group)  -- more than 1000: claims bring the rest
  end
elseif what == 'pause_group' then
  redis.call('HSET', base .. 'gconf:' .. group, 'paused', '1')
  redis.call('ZREM', groups, group)
  redis.call('ZADD', gwait, '+inf', group)
elseif what == 'resume_group' then
  redis.call('HDEL', base .. 'gconf:' .. group, 'paused')
  let_back(group)
else
  return redis.error_reply('ERR unknown limits operation ' .. tostring(what))
end
wake(marker)
return 1
