--#include index_rows.lua
-- Index one stored run, then trim the index: runs older than the cutoff, then the oldest
-- beyond the most runs kept (at most cap refs dropped in one call).
-- KEYS[1..5] and ARGV[1..3]: as in index_rows.lua
-- ARGV[4] the stored entry   ARGV[5] its finish time   ARGV[6] cutoff (finish time)
-- ARGV[7] the most runs kept   ARGV[8] cap
-- Returns {added 0|1, dropped}

local function trim(cutoff, max_runs, cap)
  local dropped = drop_all(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', cutoff,
    'LIMIT', 0, cap))
  local excess = math.min(redis.call('ZCARD', KEYS[2]) - max_runs, cap - dropped)
  if excess > 0 then dropped = dropped + drop_all(redis.call('ZRANGE', KEYS[2], 0, excess - 1)) end
  return dropped
end

local added = add(ARGV[4], ARGV[5])
return {added, trim(ARGV[6], tonumber(ARGV[7]), tonumber(ARGV[8]))}
