--#include acl_guard.lua
-- At shutdown, hand a job that ran and failed but couldn't be filed to any live process:
-- push its filing record onto cogworker:unsettled, then take it off the in-progress list.
-- KEYS[1]  cogworker:inprogress:<identity>
-- KEYS[2]  cogworker:unsettled
-- ARGV[1]  raw job as fetched
-- ARGV[2]  record JSON {"set","score","payload"}
-- Returns  1 if parked, 0 if the job was no longer in progress.
if not redis.call("LPOS", KEYS[1], ARGV[1]) then
  return 0
end
local denied = acl_denied("lrem", KEYS[1], "1", ARGV[1])
if denied then
  return denied
end
redis.call("RPUSH", KEYS[2], ARGV[2])
redis.call("LREM", KEYS[1], 1, ARGV[1])
return 1
