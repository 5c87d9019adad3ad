-- Move one due entry of the schedule or retry set onto the head of its queue (like a new
-- job): push first, then remove, so an abort in between can't lose it. The payload is
-- re-encoded by the caller (with enqueued_at re-stamped), never by cjson, which would round
-- big integers.
-- KEYS[1]  the source set (cogworker:schedule or cogworker:retry)
-- KEYS[2]  cogworker:queues
-- KEYS[3]  cogworker:queue:<name>
-- ARGV[1]  entry as stored
-- ARGV[2]  queue name
-- ARGV[3]  new payload
-- Returns  1 if moved, 0 if another process took it first.
if not redis.call("ZSCORE", KEYS[1], ARGV[1]) then
  return 0
end
redis.call("LPUSH", KEYS[3], ARGV[3])
redis.call("ZREM", KEYS[1], ARGV[1])
pcall(redis.call, "SADD", KEYS[2], ARGV[2])
return 1
