--#include acl_guard.lua
-- File the record at the head of cogworker:unsettled into its set, then drop it.
-- KEYS[1]  cogworker:unsettled
-- KEYS[2]  cogworker:orphanings:<jid> of the payload
-- KEYS[3]  the target set (cogworker:retry, cogworker:dead or cogworker:schedule)
-- ARGV[1]  record (must still be the head)
-- ARGV[2]  score
-- ARGV[3]  payload
-- Returns  1 if filed, 0 if another process filed it first.
if redis.call("LINDEX", KEYS[1], 0) ~= ARGV[1] then
  return 0
end
local denied = acl_denied("lpop", KEYS[1])
if denied then
  return denied
end
redis.call("ZADD", KEYS[3], ARGV[2], ARGV[3])
redis.call("LPOP", KEYS[1])
pcall(redis.call, "DEL", KEYS[2])
return 1
