-- Move an entry of the schedule or retry set to the dead set: destination first.
-- KEYS[1]  the source set          KEYS[2]  cogworker:dead
-- ARGV[1]  entry as stored
-- ARGV[2]  time of death
-- Returns  1 if moved, 0 if the entry is gone.
if not redis.call("ZSCORE", KEYS[1], ARGV[1]) then
  return 0
end
redis.call("ZADD", KEYS[2], ARGV[2], ARGV[1])
redis.call("ZREM", KEYS[1], ARGV[1])
return 1
