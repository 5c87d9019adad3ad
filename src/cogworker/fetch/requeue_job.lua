--#include retake_lock.lua
-- requeue_job(raw, queue_prefix, default_queue, lock_prefix, lock_ttl) -> queue name
-- Put one raw job back at the tail of its queue (it runs next). A job whose payload can't be
-- read goes to the default queue, where the processor buries it. A cron run that holds its
-- entry's running lock re-takes it in the same step.
local function requeue_job(raw, queue_prefix, default_queue, lock_prefix, lock_ttl)
  local queue = default_queue
  local ok, job = pcall(cjson.decode, raw)
  if ok and type(job) == "table" then
    if type(job.queue) == "string" and job.queue ~= "" then
      queue = job.queue
    end
    if job.periodic_until_executed == true and type(job.periodic_pjid) == "string"
        and type(job.jid) == "string" then
      retake_running_lock(lock_prefix .. job.periodic_pjid, job.jid, lock_ttl)
    end
  end
  redis.call("RPUSH", queue_prefix .. queue, raw)
  return queue
end
