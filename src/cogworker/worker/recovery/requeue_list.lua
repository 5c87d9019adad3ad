--#include requeue_job.lua
--#include acl_guard.lua
-- Requeue a process's in-progress list: a dead process's (orphan recovery), a swarm child's
-- its supervisor has reaped, or our own at shutdown. The liveness verdict and the requeue
-- happen in this one step, so a process that beats meanwhile can't have its running jobs
-- taken.
-- KEYS[1]  cogworker:inprogress:<owner>       KEYS[2]  cogworker:process:<owner>
-- KEYS[3]  cogworker:last_beat                KEYS[4]  cogworker:repeat_orphans
-- KEYS[5]  cogworker:dead                     KEYS[6]  cogworker:queues
-- KEYS[7]  cogworker:live_queues              KEYS[8]  cogworker:workers:<owner>
-- KEYS[9]  cogworker:processes                KEYS[10] cogworker:inprogress_identities
-- Keys named after what a job holds are built from prefixes, as only the job read here says
-- which: its queue (ARGV[1] .. queue, keys.QUEUE_PREFIX), its cron entry's running lock
-- (ARGV[3] .. pjid, keys.PERIODIC_RUNNING_PREFIX), its orphan counter (ARGV[8] .. jid,
-- keys.ORPHANINGS_PREFIX).
-- ARGV[1]  queue key prefix   ARGV[2] default queue   ARGV[3] running-lock key prefix
-- ARGV[4]  running-lock TTL   ARGV[5] owner identity
-- ARGV[6]  orphan threshold in seconds (recovery: only if the owner is dead); "reaped" when
--          the owner is known dead (its supervisor reaped it): no verdict, recoveries counted,
--          and its presence removed once its list is empty; "" to requeue unconditionally
--          (own shutdown)
-- ARGV[7]  caller's epoch seconds (used when TIME is refused)
-- ARGV[8]  orphan counter key prefix   ARGV[9] counter TTL   ARGV[10] max orphanings
-- ARGV[11..] "d:<raw>" already finished, drop it; "k:<raw>" keep it on the list
-- Returns  {-1, 0, 0, 0, 0} when the owner is alive, else {moved, failed, n_unlisted, n_buried,
--          parked, unlisted queue names..., raws buried straight into dead..., raws sent to the
--          default queue because no queue could be read in them...}; "moved" counts the jobs
--          taken off the list, "parked" those of them recovered too often (not requeued)
if redis.replicate_commands then
  pcall(redis.replicate_commands)
end

local function redis_now()
  local ok, time = pcall(redis.call, "TIME")
  if ok then
    return tonumber(time[1])
  end
  return tonumber(ARGV[7])
end

local reaped = ARGV[6] == "reaped"
local recovering = ARGV[6] ~= ""
if recovering and not reaped then
  if redis.call("EXISTS", KEYS[2]) == 1 then
    return {-1, 0, 0, 0, 0}
  end
  local last = tonumber(redis.call("HGET", KEYS[3], ARGV[5]) or "")
  if last and redis_now() - last <= tonumber(ARGV[6]) then
    return {-1, 0, 0, 0, 0}
  end
end

local denied = acl_denied("lpop", KEYS[1])
if denied then
  return denied
end

local finished, keep = {}, {}
for i = 11, #ARGV do
  local mark, raw = string.sub(ARGV[i], 1, 2), string.sub(ARGV[i], 3)
  if mark == "d:" then
    finished[raw] = true
  elseif mark == "k:" then
    keep[raw] = true
  end
end

local clock = redis_now()
local moved, failed, parked_count = 0, 0, 0
local kept, unlisted, unlisted_seen, buried, unnamed = {}, {}, {}, {}, {}
local n = redis.call("LLEN", KEYS[1])
for _ = 1, n do
  local raw = redis.call("LINDEX", KEYS[1], 0)
  if not raw then
    break
  end
  local ok, job = pcall(cjson.decode, raw)
  local jid = nil
  if ok and type(job) == "table" and type(job.jid) == "string" then
    jid = job.jid
  end
  if finished[raw] then
    redis.call("LPOP", KEYS[1])
    if jid then
      pcall(redis.call, "DEL", ARGV[8] .. jid)
    end
  elseif keep[raw] then
    redis.call("LPOP", KEYS[1])
    kept[#kept + 1] = raw
  else
    local counter = nil
    local parked, written, queue = false, false, nil
    if recovering and jid then
      counter = ARGV[8] .. jid
      local got, current = pcall(redis.call, "GET", counter)
      local count = nil
      if got and current then
        count = tonumber(current)
        if not count then
          pcall(redis.call, "DEL", counter)
        end
      elseif not got then
        pcall(redis.call, "DEL", counter)
      end
      count = (count or 0) + 1
      if count > tonumber(ARGV[10]) then
        parked = pcall(redis.call, "RPUSH", KEYS[4], raw)
        if not parked then
          parked = pcall(redis.call, "ZADD", KEYS[5], ARGV[7], raw)
          if parked then
            buried[#buried + 1] = raw
          end
        end
      end
    end
    if not parked then
      local done, result, named = pcall(requeue_job, raw, ARGV[1], ARGV[2], ARGV[3], ARGV[4])
      written = done
      if done then
        queue = result
        if not named then
          unnamed[#unnamed + 1] = raw
        end
      end
    end
    if written and queue and not unlisted_seen[queue] then
      local seen_ok, seen = pcall(redis.call, "ZSCORE", KEYS[7], queue)
      if not seen_ok or not seen or tonumber(seen) < clock - 120 then
        pcall(redis.call, "SADD", KEYS[6], queue)
        unlisted_seen[queue] = true
        unlisted[#unlisted + 1] = queue
      end
    end
    redis.call("LPOP", KEYS[1])
    if parked then
      parked_count = parked_count + 1
    end
    if written or parked then
      if counter then
        pcall(redis.call, "INCR", counter)
        pcall(redis.call, "EXPIRE", counter, ARGV[9])
      end
      moved = moved + 1
    else
      redis.call("RPUSH", KEYS[1], raw)
      failed = failed + 1
    end
  end
end
for _, raw in ipairs(kept) do
  redis.call("RPUSH", KEYS[1], raw)
end
if reaped then
  -- gone for good: nobody should count it as a process or show it busy; its identity stays
  -- registered for orphan recovery while some job couldn't be put back
  pcall(redis.call, "DEL", KEYS[2], KEYS[8])
  pcall(redis.call, "SREM", KEYS[9], ARGV[5])
  if failed == 0 then
    pcall(redis.call, "SREM", KEYS[10], ARGV[5])
    pcall(redis.call, "HDEL", KEYS[3], ARGV[5])
  end
end

local result = {moved, failed, #unlisted, #buried, parked_count}
for _, list in ipairs({unlisted, buried, unnamed}) do
  for _, item in ipairs(list) do
    result[#result + 1] = item
  end
end
return result
