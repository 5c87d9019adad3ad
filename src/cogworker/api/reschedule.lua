-- Move an entry of a sorted set to a new due time, in one step (never duplicated or lost).
-- KEYS[1]  the set (cogworker:schedule or cogworker:retry)
-- ARGV[1]  entry as stored
-- ARGV[2]  new score
-- Returns  1 if moved, 0 if the entry is gone.
if not redis.call("ZSCORE", KEYS[1], ARGV[1]) then
  return 0
end
redis.call("ZADD", KEYS[1], "XX", ARGV[2], ARGV[1])
return 1
