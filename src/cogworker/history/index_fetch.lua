--#include index_rows.lua
-- The stored entries of some refs, in order; a ref whose entry is gone is unindexed.
-- KEYS[1..5] and ARGV[1..3]: as in index_rows.lua
-- ARGV[4..] the refs
-- Returns {finish time, entry, ...} of the refs still stored (fewer pairs when some are gone)

local function fetch(refs)
  local found = {}
  for _, ref in ipairs(refs) do
    local score = redis.call('ZSCORE', KEYS[2], ref)
    local member = nil
    if score then
      for _, candidate in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], score, score)) do
        if string.sub(redis.sha1hex(candidate), 1, 16) == ref then member = candidate end
      end
    end
    if member then
      found[#found + 1] = score
      found[#found + 1] = member
    else
      drop(ref)
    end
  end
  return found
end

return fetch({unpack(ARGV, 4)})
