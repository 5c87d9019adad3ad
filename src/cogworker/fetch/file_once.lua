--#include acl_guard.lua
-- Basic fetch's filing of a popped job into a sorted set, once per fetched attempt: BRPOP left
-- no in-progress entry to guard it, so a marker stands for it. A filing sent again after its
-- reply was lost (the interrupt, a later settle) finds the marker and writes nothing.
-- KEYS[1]  cogworker:filed:<jid>:<digest of the payload as fetched>
-- KEYS[2]  the target set (cogworker:retry, cogworker:dead or cogworker:schedule)
-- ARGV[1]  the marker's TTL, seconds
-- ARGV[2]  score
-- ARGV[3]  payload to file
-- Returns  1 if filed, 0 if this attempt was filed before.
if redis.call("EXISTS", KEYS[1]) == 1 then
  return 0
end
-- asked first: a ZADD kept without its marker would be filed again by the next attempt
local denied = acl_denied("set", KEYS[1], "1", "EX", ARGV[1])
if denied then
  return denied
end
redis.call("ZADD", KEYS[2], ARGV[2], ARGV[3])
redis.call("SET", KEYS[1], "1", "EX", ARGV[1])
return 1
