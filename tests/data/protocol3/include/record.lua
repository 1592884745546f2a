-- The job record's defaults (docs/protocol.md §4.1). A field whose value is
-- its default is not stored: fewer fields keep a record small (a listpack)
-- and cheap to write. Every reader applies these to a missing field.
local RECORD_DEFAULTS = {
  priority = 1000, attempts = 0, failures = 0, stalls = 0, max_failures = 3, max_stalls = 3,
  min_backoff = 1000, max_backoff = 300000, timeout = 300000, result_ttl = 86400000,
}
-- The options, in the order a new record stores those that differ.
local RECORD_OPTIONS = {'priority', 'max_failures', 'max_stalls', 'min_backoff', 'max_backoff',
                        'timeout', 'result_ttl'}

-- A record field as a number: its default when missing (or corrupt: a
-- script must never raise once it has written something).
local function field(value, name)
  return tonumber(value) or RECORD_DEFAULTS[name]
end

-- Data pieces (docs/protocol.md §4.1). Redis keeps a hash compact (a
-- listpack, about half the memory of a hashtable) only while every value is
-- at most hash-max-listpack-value bytes, 64 by default: a longer `data` is
-- split into `data`, `data2`, `data3`, ... of at most 64 bytes each. A piece
-- never ends just before a UTF-8 continuation byte (0x80-0xBF), so that a
-- client decoding replies as text can decode every piece. Data over 4096
-- bytes (or needing over 64 pieces) is stored whole: the hash would not be a
-- listpack at that size anyway, and reading it whole stays one field.
local PIECE_BYTES, PIECES_MAX, PIECED_MAX = 64, 64, 4096

local function continues(data, at)
  local b = string.byte(data, at)
  return b ~= nil and b >= 128 and b < 192
end

-- The piece names: 'data', 'data2', ... (built when needed: most calls need none).
local function piece_name(k)
  return k == 1 and 'data' or 'data' .. k
end

local function piece_names(from, to)
  local names = {}
  for k = from, to do names[#names + 1] = piece_name(k) end
  return names
end

-- Appends the HSET arguments of `data` to `fields`; returns the number of
-- pieces written (1 when stored whole).
local function put_data(fields, data)
  local n, size = #fields, #data
  if size <= PIECE_BYTES or size > PIECED_MAX then
    fields[n + 1], fields[n + 2] = 'data', data
    return 1
  end
  local pieces, start = {}, 1
  while start <= size do
    local stop = start + PIECE_BYTES - 1
    if stop < size then
      -- a UTF-8 character is at most 4 bytes: back off at most 3; more
      -- continuation bytes than that is not UTF-8, cut at 64 then
      local cut = stop
      while cut >= stop - 3 and continues(data, cut + 1) do cut = cut - 1 end
      if cut >= stop - 3 then stop = cut end
    else
      stop = size
    end
    if #pieces == PIECES_MAX then
      fields[n + 1], fields[n + 2] = 'data', data
      return 1
    end
    pieces[#pieces + 1] = string.sub(data, start, stop)
    start = stop + 1
  end
  for k, piece in ipairs(pieces) do
    fields[n + 1], fields[n + 2], n = piece_name(k), piece, n + 2
  end
  return #pieces
end

-- The whole data of the record at `key`, given the values of `data` and
-- `data2` already read (false or nil: missing) and optionally `data3`
-- (leave it out, nil, when it was not read; false: read and missing). The
-- remaining pieces are read 16 at a time until one is missing: at most 4
-- HMGETs, bounded by the 64-piece cap.
local function read_data(key, data, data2, data3)
  if not (data and data2) then return data end
  local parts = {data, data2}
  local k = 3
  if data3 ~= nil then
    if not data3 then return data .. data2 end
    parts[3], k = data3, 4
  end
  while k <= PIECES_MAX do
    local last = math.min(k + 15, PIECES_MAX)
    local got = redis.call('HMGET', key, unpack(piece_names(k, last)))
    for i = 1, #got do
      if not got[i] then return table.concat(parts) end
      parts[#parts + 1] = got[i]
    end
    k = last + 1
  end
  return table.concat(parts)
end

-- Writes `data` over the record at `key` (with `fields`, more HSET
-- arguments, if given) and deletes the pieces of an older, longer data.
-- Pieces are numbered without gaps: when the first number past the new ones
-- is absent, there is nothing stale to delete.
local function replace_data(key, data, fields)
  fields = fields or {}
  local count = put_data(fields, data)
  redis.call('HSET', key, unpack(fields))
  if count < PIECES_MAX and redis.call('HEXISTS', key, piece_name(count + 1)) == 1 then
    redis.call('HDEL', key, unpack(piece_names(count + 1, PIECES_MAX)))
  end
end

-- A record read with HGETALL (`flat`, name/value pairs) as a table, with
-- its data pieces joined into `data`.
local function record_table(flat)
  local t = {}
  for i = 1, #flat, 2 do
    t[flat[i]] = flat[i + 1]
  end
  if t.data and t.data2 then
    local parts = {t.data}
    for k = 2, PIECES_MAX do
      local name = piece_name(k)
      local piece = t[name]
      if not piece then break end
      parts[k] = piece
      t[name] = nil
    end
    t.data = table.concat(parts)
  end
  return t
end
