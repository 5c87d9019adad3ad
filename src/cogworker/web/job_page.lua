-- One page of the Jobs table across several job sources, read in one step: the page and the
-- sizes it reports agree, and only the rows of the page are sent back.
-- KEYS[1..] the sources in the table's order: queue lists, then sorted sets
-- ARGV[1]   rows to skip, counted across the sources that are paged
-- ARGV[2]   rows to send back at most
-- ARGV[3..] one per key: "tail" (a list read from its next job, the tail), "asc" or "desc"
--           (a sorted set by score), or "list" / "zset" (only its size: not in this view)
-- Returns   {{size per key, -1 for a key of another type}, {key index, position in that
--           source, entry, score ("" for a list), key index, ...}}
local skip = tonumber(ARGV[1])
local wanted = tonumber(ARGV[2])
local sizes, rows = {}, {}

local function add(index, position, entry, score)
  rows[#rows + 1] = index
  rows[#rows + 1] = position
  rows[#rows + 1] = entry
  rows[#rows + 1] = score
end

for index, key in ipairs(KEYS) do
  local mode = ARGV[index + 2]
  local is_list = mode == "tail" or mode == "list"
  local ok, size = pcall(redis.call, is_list and "LLEN" or "ZCARD", key)
  if not ok then
    size = -1
  end
  sizes[index] = size
  local paged = mode == "tail" or mode == "asc" or mode == "desc"
  if paged and size > 0 then
    if skip >= size then
      skip = skip - size
    elseif wanted > 0 then
      local first = skip
      local last = math.min(size, skip + wanted) - 1
      skip = 0
      if is_list then
        -- position p counts from the tail: index -(p + 1)
        local items = redis.call("LRANGE", key, -(last + 1), -(first + 1))
        for j = #items, 1, -1 do
          add(index, first + #items - j, items[j], "")
        end
        wanted = wanted - #items
      else
        local command = mode == "asc" and "ZRANGE" or "ZREVRANGE"
        local items = redis.call(command, key, first, last, "WITHSCORES")
        for j = 1, #items, 2 do
          add(index, first + (j - 1) / 2, items[j], items[j + 1])
        end
        wanted = wanted - #items / 2
      end
    end
  end
end
return {sizes, rows}
