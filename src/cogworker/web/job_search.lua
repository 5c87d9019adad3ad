-- Look for a text in one slice of a job source and send back only the entries that may hold
-- it: the Jobs table's search, in short steps so that Redis never stalls for long.
-- KEYS[1]  a queue list or a job sorted set
-- ARGV[1]  "list" or "zset"
-- ARGV[2]  first index to read: a list from its head (newest), a sorted set from its highest
--          score (the ends entries don't leave from, so none is skipped while it moves)
-- ARGV[3]  how many entries to read
-- ARGV[4]  the text, lowercased ASCII; "" sends back every entry read
-- Returns  {size of the source now, entries read, then index, entry, score ("" for a list)
--          for each entry whose lowercased text holds ARGV[4] or that isn't a "{...}" text
--          (it may be an unparseable entry, whose shown class and jid are not in its text)}
local first = tonumber(ARGV[2])
local last = first + tonumber(ARGV[3]) - 1
local needle = ARGV[4]
local items, size, step
if ARGV[1] == "list" then
  size = redis.call("LLEN", KEYS[1])
  items = redis.call("LRANGE", KEYS[1], first, last)
  step = 1
else
  size = redis.call("ZCARD", KEYS[1])
  items = redis.call("ZREVRANGE", KEYS[1], first, last, "WITHSCORES")
  step = 2
end
local found = {size, #items / step}
for j = 1, #items, step do
  local entry = items[j]
  local keep = needle == ""
    or string.sub(entry, 1, 1) ~= "{"
    or string.sub(entry, -1) ~= "}"
    or string.find(string.lower(entry), needle, 1, true) ~= nil
  if keep then
    found[#found + 1] = first + (j - 1) / step
    found[#found + 1] = entry
    found[#found + 1] = step == 2 and items[j + 1] or ""
  end
end
return found
