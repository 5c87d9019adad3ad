--#include requeue_job.lua
--#include acl_guard.lua
-- Hand one job back: onto the tail of its queue, then off the in-progress list. A no-op when
-- the job is no longer in progress (someone settled or recovered it meanwhile).
-- KEYS[1]  cogworker:inprogress:<identity>
-- ARGV     raw job, queue prefix, default queue, running-lock prefix, lock TTL
-- Returns  1 if requeued, 0 if it was not in progress.
if not redis.call("LPOS", KEYS[1], ARGV[1]) then
  return 0
end
local denied = acl_denied("lrem", KEYS[1], "1", ARGV[1])
if denied then
  return denied
end
requeue_job(ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
redis.call("LREM", KEYS[1], 1, ARGV[1])
return 1
