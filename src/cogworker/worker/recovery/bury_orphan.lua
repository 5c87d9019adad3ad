--#include acl_guard.lua
-- Move the head of cogworker:repeat_orphans into the dead set as a proper entry.
-- KEYS[1]  cogworker:repeat_orphans
-- KEYS[2]  cogworker:dead
-- ARGV[1]  raw (must still be the head)
-- ARGV[2]  score
-- ARGV[3]  dead entry
-- Returns  1 if moved, 0 if another process moved it first.
if redis.call("LINDEX", KEYS[1], 0) ~= ARGV[1] then
  return 0
end
local denied = acl_denied("lpop", KEYS[1])
if denied then
  return denied
end
redis.call("ZADD", KEYS[2], ARGV[2], ARGV[3])
redis.call("LPOP", KEYS[1])
return 1
