--#include retake_lock.lua
--#include acl_guard.lua
-- Hand one job back: onto the tail of its queue (it runs next), then off the in-progress
-- list; a cron run that holds its entry's running lock re-takes it in the same step. A no-op
-- when the job is no longer in progress (someone settled or recovered it meanwhile).
-- KEYS[1]  cogworker:inprogress:<identity>
-- KEYS[2]  cogworker:queue:<the queue named in the job>
-- KEYS[3]  periodic:running:<pjid> of an until_executed cron run, else KEYS[2] again
-- ARGV[1]  raw job
-- ARGV[2]  "1" to re-take the running lock else "0"
-- ARGV[3]  jid
-- ARGV[4]  lock TTL in seconds
-- Returns  1 if requeued, 0 if it was not in progress.
if not redis.call("LPOS", KEYS[1], ARGV[1]) then
  return 0
end
local denied = acl_denied("lrem", KEYS[1], "1", ARGV[1])
if denied then
  return denied
end
if ARGV[2] == "1" then
  retake_running_lock(KEYS[3], ARGV[3], ARGV[4])
end
redis.call("RPUSH", KEYS[2], ARGV[1])
redis.call("LREM", KEYS[1], 1, ARGV[1])
return 1
