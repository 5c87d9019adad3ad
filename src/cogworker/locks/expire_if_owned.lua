-- Set the TTL of a lock only while it still belongs to the acting job, so an older run never
-- extends or shortens a newer run's lock.
-- KEYS[1]  the lock (cogworker:unique:<digest> or periodic:running:<pjid>)
-- ARGV[1]  owner jid
-- ARGV[2]  TTL in whole seconds
-- Returns  the EXPIRE reply (1) if owned, else 0.
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("EXPIRE", KEYS[1], ARGV[2])
end
return 0
