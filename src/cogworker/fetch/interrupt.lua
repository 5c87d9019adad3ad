--#include acl_guard.lua
-- File a job whose failure couldn't be recorded the normal way: into the retry or dead set,
-- then off the in-progress list (destination first, so an abort never loses it).
-- KEYS[1]  cogworker:inprogress:<identity>
-- KEYS[2]  the target set (cogworker:retry or cogworker:dead)
-- KEYS[3]  cogworker:orphanings:<jid>
-- ARGV     raw job as fetched, score, payload to file
-- Returns  1 if filed, 0 if the job was no longer in progress.
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
