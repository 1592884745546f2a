-- Shared helpers, pasted into every script at load time by `-- @include common`.
-- They are plain local functions: no key is named here, every key is derived
-- from KEYS[1], the queue's base prefix `<prefix>:{<queue>}:` (one hash tag).

local base = KEYS[1]

-- Milliseconds from the server clock: worker and producer clocks may be wrong.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Ready order: priority first (0 = highest), then a sequence number, so jobs
-- of one priority run FIFO (or LIFO). 2^21 * 2^31 + 2^31 < 2^53: exact in a double.
local SEQ_SPAN = 2147483648
local function ready_score(priority, seq)
  return (tonumber(priority) or 1000) * SEQ_SPAN + (tonumber(seq) or 0)
end

-- A number from a record field, or `default` when the field is missing or
-- corrupt: a script must never raise once it has written something.
local function num(value, default)
  return tonumber(value) or default
end

-- Wake one blocked worker: it BZPOPMINs this marker, then claims.
local function wake(marker)
  redis.call('ZADD', marker, 0, '0')
end

-- Events are capped at about `maxlen`, except that while readers are
-- registered in `consumers` (name -> last stream id read) nothing they have
-- not read is trimmed: past `maxlen` the stream is then trimmed only up to
-- the slowest reader.
local function stream_before(a, b)
  local a_ms, a_seq = string.match(a, '^(%d+)-(%d+)$')
  local b_ms, b_seq = string.match(b, '^(%d+)-(%d+)$')
  if not a_ms or not b_ms then return false end
  if tonumber(a_ms) ~= tonumber(b_ms) then return tonumber(a_ms) < tonumber(b_ms) end
  return tonumber(a_seq) < tonumber(b_seq)
end

local slowest_reader = nil  -- per script call: false = no registered reader
local function reader_floor(events)
  if slowest_reader == nil then
    slowest_reader = false
    local consumers = string.sub(events, 1, -7) .. 'consumers'  -- `...events` -> `...consumers`
    for _, position in ipairs(redis.call('HVALS', consumers)) do
      if not slowest_reader or stream_before(position, slowest_reader) then
        slowest_reader = position
      end
    end
  end
  return slowest_reader
end

-- Trim the stream to about `maxlen`, never past the slowest registered reader.
local function trim(events, maxlen)
  local floor = reader_floor(events)
  if not floor then
    redis.call('XTRIM', events, 'MAXLEN', '~', maxlen)
  elseif redis.call('XLEN', events) > tonumber(maxlen) then
    redis.call('XTRIM', events, 'MINID', '~', floor)
  end
end

local function emit(events, maxlen, ...)
  if reader_floor(events) then
    redis.call('XADD', events, '*', ...)
    trim(events, maxlen)
  else
    redis.call('XADD', events, 'MAXLEN', '~', maxlen, '*', ...)
  end
end
