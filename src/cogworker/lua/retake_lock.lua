-- retake_running_lock(lock, jid, ttl): make the periodic running lock `lock` belong to `jid`
-- for `ttl` seconds, unless another run holds it. Prepended to the scripts that requeue jobs
-- so a requeued cron run keeps its until_executed entry closed while it waits to run again.
local function retake_running_lock(lock, jid, ttl)
  local holder = redis.call("GET", lock)
  if not holder then
    redis.call("SET", lock, jid, "EX", ttl)
  elseif holder == jid then
    redis.call("EXPIRE", lock, ttl)
  end
end
