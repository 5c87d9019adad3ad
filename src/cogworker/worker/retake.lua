--#include retake_lock.lua
-- Re-take a cron entry's running lock for a job still running here (the heartbeat does this
-- on the first beat after a failed one, in case the lock expired during the outage).
-- KEYS[1]  periodic:running:<pjid>
-- ARGV[1]  jid
-- ARGV[2]  TTL in whole seconds
-- Returns  1
retake_running_lock(KEYS[1], ARGV[1], ARGV[2])
return 1
