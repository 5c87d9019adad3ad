-- Release a lock only while it still belongs to the acting job.
-- KEYS[1]  the lock (cogworker:unique:<digest> or periodic:running:<pjid>)
-- ARGV     owner jid
-- Returns  1 if deleted, else 0.
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0
