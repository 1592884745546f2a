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
