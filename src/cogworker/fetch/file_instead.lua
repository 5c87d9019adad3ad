--#include acl_guard.lua
-- File a payload into a sorted set in place of a held job, then take the job off its list
-- (destination first, so an abort never loses it): a job whose failure couldn't be recorded
-- the normal way, or a payload that is not a job, going to dead.
-- KEYS[1]  the list holding the job: cogworker:inprogress:<identity> (or a queue's list)
-- KEYS[2]  the target set (cogworker:retry, cogworker:dead or cogworker:schedule)
-- KEYS[3]  cogworker:orphanings:<jid> of the job
-- ARGV[1]  raw job as fetched
-- ARGV[2]  score
-- ARGV[3]  payload to file
-- Returns  1 if filed, 0 if the job was no longer on the list.
if not redis.call("LPOS", KEYS[1], ARGV[1]) then
  return 0
end
local denied = acl_denied("lrem", KEYS[1], "1", ARGV[1])
if denied then
  return denied
end
redis.call("ZADD", KEYS[2], ARGV[2], ARGV[3])
redis.call("LREM", KEYS[1], 1, ARGV[1])
pcall(redis.call, "DEL", KEYS[3])
return 1
