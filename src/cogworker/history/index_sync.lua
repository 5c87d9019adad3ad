--#include index_rows.lua
-- The catch-up: index the runs of history:all the index lacks (at most cap ahead of the
-- cursor, and at most cap in the overlap behind it), then drop refs older than its oldest
-- run (at most cap).
-- KEYS[1..5] and ARGV[1..3]: as in index_rows.lua
-- ARGV[4] overlap in seconds   ARGV[5] cap
-- Returns {added, dropped, behind 0|1} (behind: the read stopped at its cap)

local function sync(overlap, cap)
  local cursor = redis.call('HGET', KEYS[5], 'cursor')
  local added, from = 0, '-inf'
  if cursor then
    -- the overlap behind the cursor again (runs stamped before it, stored after), then ahead
    local back = redis.call('ZRANGEBYSCORE', KEYS[1], tonumber(cursor) - overlap, cursor,
      'WITHSCORES', 'LIMIT', 0, cap)
    for i = 1, #back, 2 do added = added + add(back[i], back[i + 1]) end
    from = '(' .. cursor
  end
  local found = redis.call('ZRANGEBYSCORE', KEYS[1], from, '+inf', 'WITHSCORES', 'LIMIT', 0, cap)
  for i = 1, #found, 2 do added = added + add(found[i], found[i + 1]) end
  if #found > 0 then redis.call('HSET', KEYS[5], 'cursor', found[#found]) end
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  local stale
  if #oldest == 0 then
    stale = redis.call('ZRANGE', KEYS[2], 0, cap - 1)
    redis.call('HDEL', KEYS[5], 'cursor')
  else
    stale = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. oldest[2], 'LIMIT', 0, cap)
  end
  -- behind: the read ahead stopped at its cap, more runs wait for the next read
  return {added, drop_all(stale), #found == 2 * cap and 1 or 0}
end

return sync(tonumber(ARGV[4]), tonumber(ARGV[5]))
