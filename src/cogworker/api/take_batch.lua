-- Take up to ARGV[1] jobs off the tail of a queue (the next to run), in one step, and return
-- the few that may own a lock, so the caller can release those locks.
-- KEYS[1]  cogworker:queue:<name>
-- ARGV[1]  how many jobs at most
-- ARGV[2]  a marker: only jobs whose text contains it are returned
-- Returns  {how many were taken, raw job containing the marker, ...}
local taken = redis.call("LRANGE", KEYS[1], -tonumber(ARGV[1]), -1)
local holders = {#taken}
for _, raw in ipairs(taken) do
  if string.find(raw, ARGV[2], 1, true) then
    holders[#holders + 1] = raw
  end
end
if #taken > 0 then
  redis.call("LTRIM", KEYS[1], 0, -(#taken + 1))
end
return holders
