--#include retake_lock.lua
-- Basic fetch, shutdown: put an in-flight job (from the workers hash) back on its queue and,
-- for a cron run, re-take its running lock in the same step.
-- KEYS[1]  cogworker:queue:<the job's queue>
-- KEYS[2]  periodic:running:<pjid> of an until_executed cron run, else KEYS[1] again
-- ARGV[1]  payload JSON
-- ARGV[2]  "1" to re-take the lock else "0"
-- ARGV[3]  jid
-- ARGV[4]  lock TTL in seconds
-- Returns  1
redis.call("RPUSH", KEYS[1], ARGV[1])
if ARGV[2] == "1" then
  retake_running_lock(KEYS[2], ARGV[3], ARGV[4])
end
return 1
