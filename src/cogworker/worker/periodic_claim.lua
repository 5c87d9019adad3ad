-- Claim one slot of a cron entry for this process: at most one process wins each slot.
-- The running lock of an until_executed entry is written here, before the job exists, so a
-- fast job can never release a lock that isn't there yet.
-- KEYS[1]  periodic:running:<pjid>     KEYS[2]  periodic:last_slot:<pjid>
-- KEYS[3]  periodic:lock:<pjid>:<slot>
-- ARGV[1]  slot (epoch seconds)
-- ARGV[2]  "until_executed" or ""
-- ARGV[3]  slot lock TTL
-- ARGV[4]  jid for this slot
-- ARGV[5]  running lock TTL
-- Returns  2 when a previous run still holds the entry, {1, previous slot or ""} when won,
--          0 when the slot was already taken.
if ARGV[2] == "until_executed" and redis.call("GET", KEYS[1]) then
  return 2
end
local previous = redis.call("GET", KEYS[2])
if tonumber(ARGV[1]) <= tonumber(previous or "0") then
  return 0
end
if not redis.call("SET", KEYS[3], "1", "NX", "EX", ARGV[3]) then
  return 0
end
redis.call("SET", KEYS[2], ARGV[1])
if ARGV[2] == "until_executed" then
  redis.call("SET", KEYS[1], ARGV[4], "EX", ARGV[5])
end
return {1, previous or ""}
