--#include acl_guard.lua
-- Move the unusable record at the head of cogworker:unsettled aside, once even when two
-- processes find it together.
-- KEYS[1]  cogworker:unsettled          KEYS[2]  cogworker:quarantine:cogworker:unsettled:records
-- ARGV[1]  record (must still be the head)
-- ARGV[2]  quarantine TTL in seconds
-- Returns  1 if moved, 0 if another process moved or filed it first.
if redis.call("LINDEX", KEYS[1], 0) ~= ARGV[1] then
  return 0
end
local denied = acl_denied("lpop", KEYS[1])
if denied then
  return denied
end
redis.call("RPUSH", KEYS[2], ARGV[1])
redis.call("EXPIRE", KEYS[2], ARGV[2])
redis.call("LPOP", KEYS[1])
return 1
