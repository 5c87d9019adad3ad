--#include retake_lock.lua
-- requeue_job(raw, queue_prefix, default_queue, lock_prefix, lock_ttl) -> queue name, named
-- Put one raw job back at the tail of its queue (it runs next). A payload in which no queue
-- can be read goes to the default queue, where the processor buries it; `named` is false
-- then. A cron run that holds its entry's running lock re-takes it in the same step.
-- The keys are named after what the payload holds, so they are built here from prefixes:
-- queue_prefix .. queue (keys.QUEUE_PREFIX), lock_prefix .. pjid (keys.PERIODIC_RUNNING_PREFIX).
local function requeue_job(raw, queue_prefix, default_queue, lock_prefix, lock_ttl)
  local queue, named = default_queue, false
  local ok, job = pcall(cjson.decode, raw)
  if ok and type(job) == "table" then
    if type(job.queue) == "string" and job.queue ~= "" then
      queue, named = job.queue, true
    end
    if job.periodic_until_executed == true and type(job.periodic_pjid) == "string"
        and type(job.jid) == "string" then
      retake_running_lock(lock_prefix .. job.periodic_pjid, job.jid, lock_ttl)
    end
  end
  redis.call("RPUSH", queue_prefix .. queue, raw)
  return queue, named
end
