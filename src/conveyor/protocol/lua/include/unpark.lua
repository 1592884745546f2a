-- Concurrency keys, the part every run's end needs (docs/protocol.md §16.5;
-- the rest, for claim, is in ckeys.lua): bringing parked jobs back to their
-- ready index. Needs `common` and `place`.

local function ckey_names(field_value)
  local names = {}
  for name in string.gmatch(field_value, '[^,]+') do names[#names + 1] = name end
  return names
end

-- Up to `count` parked jobs of `key` back to their ready index (a job
-- cancelled or changed meanwhile is only dropped); returns how many.
local function ckey_unpark(key, count, marker)
  local popped = redis.call('ZPOPMIN', base .. 'kwait:' .. key, count)
  local back = 0
  for i = 1, #popped, 2 do
    local id, score = popped[i], popped[i + 1]
    redis.call('ZREM', base .. 'parked', id)
    local f = redis.call('HMGET', base .. 'job:' .. id, 'state', 'group')
    if f[1] == 'waiting' then
      if f[2] and f[2] ~= '' then
        redis.call('ZADD', base .. 'gready:' .. f[2], score, id)
        enter_rotation(f[2])
      else
        redis.call('ZADD', base .. 'ready', score, id)
      end
      back = back + 1
    end
  end
  if back > 0 then wake(marker) end
  return back
end

-- A run of a job with keys ended: free a slot of each key, and bring one
-- job parked on it back.
local function ckey_end(field_value, marker)
  for _, key in ipairs(ckey_names(field_value)) do
    if redis.call('HINCRBY', base .. 'kactive', key, -1) <= 0 then
      redis.call('HDEL', base .. 'kactive', key)
    end
    ckey_unpark(key, 1, marker)
  end
end

