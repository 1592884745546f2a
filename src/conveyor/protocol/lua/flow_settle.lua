-- flow_settle: apply hand-offs from children in other queues to their
-- parents in this queue (docs/protocol.md §14.5). A drainer reads them from
-- the children's queue's `outbox`, runs this on the parents' slot, then
-- deletes the entries it applied.
--
-- KEYS[1] base        `<prefix>:{<queue>}:` of the parents' queue — job:<id>,
--                     pending:<id>, processed:<id>, ... derive from it
-- KEYS[2] ready       zset
-- KEYS[3] scheduled   zset
-- KEYS[4] marker      zset: wake-up marker
-- KEYS[5] events      stream
-- KEYS[6] completed   zset
-- KEYS[7] failed      zset
-- KEYS[8] wchildren   zset: ids in waiting_children
-- KEYS[9] blocked     zset
--
-- ARGV[1] events stream max length
-- ARGV[2 ..] per hand-off, 5 entries: parent id, child reference
--   `<queue>/<id>`, outcome (completed | failed), payload (result JSON or
--   error text), policy (the child's on_fail: '' = fail | ignore | remove | continue)
--
-- Returns, per hand-off in order: 'dup' (applied before, or the parent is
-- gone: nothing changed) | 'recorded' | 'released' (the parent became
-- runnable) | 'failed' (the parent failed: the child failed under `fail`) |
-- 'failed+' (the same, and the parent's own hand-off went to this queue's
-- `outbox`: drain it now, §14.5).
--
-- Effects: the child's reference leaves pending:<parent>; its result or
-- error is recorded (processed / ignored / cfailed); the parent is placed
-- (`children_done` event) when nothing is pending or the policy is
-- continue, or fails (`failed` event, waiters told, retained, and its own
-- hand-off made towards its parent: applied here or written to `outbox`).
-- Complexity: O(hand-offs * log N).

-- @include common
-- @include record
-- @include upsert
-- @include place
-- @include finish
-- @include counts
-- @include flow

local maxlen = ARGV[1]
local now = now_ms()

local out = {}
for i = 2, #ARGV, 5 do
  outbox_sent = false
  local result = settle(ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], now, maxlen)
  out[#out + 1] = outbox_sent and result .. '+' or result
end
return out
