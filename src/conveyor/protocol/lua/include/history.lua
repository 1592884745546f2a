-- Attempt history (docs/protocol.md §16.1): a record keeps the errors of its
-- last HISTORY_MAX failed or stalled runs in `errors`, a JSON array, oldest
-- first, of {"attempt": n, "at": ms, "error": text, "kind": "failed" or
-- "stalled", "started": ms, "worker": id}, each text cut to
-- HISTORY_TEXT bytes (never inside a UTF-8 character). Bounded: at most
-- 10 x 8 KiB per record, whatever the number of runs. Needs `common`.
local HISTORY_MAX, HISTORY_TEXT = 10, 8192

local function history_text(err)
  if #err <= HISTORY_TEXT then return err end
  local stop = HISTORY_TEXT
  while stop > HISTORY_TEXT - 3 do  -- back off a UTF-8 continuation byte (0x80-0xBF)
    local b = string.byte(err, stop + 1)
    if not (b and b >= 128 and b < 192) then break end
    stop = stop - 1
  end
  return string.sub(err, 1, stop)
end

-- Appends the error of run `attempt` to the record's history, with how it
-- ended (`kind`: failed | stalled), its start and its worker (one HMGET and
-- one HSET; a corrupt `errors` field starts the history afresh).
local function remember_error(job_key, attempt, err, now, kind)
  local list = {}
  local f = redis.call('HMGET', job_key, 'errors', 'started_at', 'worker')
  if f[1] then
    local ok, decoded = pcall(cjson.decode, f[1])
    if ok and type(decoded) == 'table' then list = decoded end
  end
  list[#list + 1] = {attempt = num(attempt, 0), at = now, error = history_text(err), kind = kind,
                     started = num(f[2], 0), worker = f[3] or ''}
  while #list > HISTORY_MAX do table.remove(list, 1) end
  redis.call('HSET', job_key, 'errors', cjson.encode(list))
end
