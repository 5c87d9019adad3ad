-- One processor thread's turnover: settle the bookkeeping of the job it just finished and take
-- its next job, in one round trip. Everything here is what the bookkeeper would otherwise send
-- for this thread (the ack, the workers-hash entry, the counters) plus one LMOVE.
-- KEYS[1]       cogworker:inprogress:<identity>
-- KEYS[2]       cogworker:orphanings:<jid> of the job acknowledged (any key when ARGV[1] is "")
-- KEYS[3]       cogworker:workers:<identity>
-- KEYS[4]       cogworker:stats:processed
-- KEYS[5]       cogworker:stats:failed
-- KEYS[6]       cogworker:throughput:<hour>
-- KEYS[7..]     queue keys to take from, in the order to try (none: take nothing)
-- ARGV[1]       the raw job to acknowledge exactly as fetched, or "" for none
-- ARGV[2]       the thread's id (its field in the workers hash)
-- ARGV[3]       jobs processed to count (0 or more)
-- ARGV[4]       jobs failed to count (0 or more)
-- ARGV[5]       TTL of the throughput bucket, seconds
-- ARGV[6]       the start time to record in the workers-hash entry (epoch seconds)
-- ARGV[7..]     per queue key in KEYS[7..]: the entry's opening, '{"queue":"<name>","payload":'
-- Returns       {removed, failures} or {removed, failures, queue_key, raw}: removed is 1 if
--               the acknowledged job was still listed (0 if not, or none given); failures is
--               a flat list {part, error, ...} of what failed after the acknowledgement, part
--               "bookkeeping" (counters, workers hash) or "fetch" (a queue that couldn't be
--               read); raw is the job taken, now at the head of the in-progress list and in
--               the workers hash under the thread's id.
-- Only the LREM can fail the script, and it comes first: a failed call wrote nothing, so the
-- caller may send the same writes again another way.
local inprogress, workers, tid = KEYS[1], KEYS[3], ARGV[2]
local failures = {}

-- everything after the acknowledgement is best-effort, as in the bookkeeper's batch: a key of
-- the wrong type must not undo the acknowledgement (nor count the job twice when the caller
-- sends the writes again)
local function try(part, ...)
  local ok, result = pcall(redis.call, ...)
  if ok then
    return result
  end
  failures[#failures + 1] = part
  failures[#failures + 1] = type(result) == "table" and result.err or tostring(result)
  return false
end

local removed = 0
if ARGV[1] ~= "" then
  removed = redis.call("LREM", inprogress, 1, ARGV[1])
  try("bookkeeping", "DEL", KEYS[2])
end

local processed, failed = tonumber(ARGV[3]), tonumber(ARGV[4])
if processed > 0 then
  try("bookkeeping", "INCRBY", KEYS[4], processed)
  try("bookkeeping", "HINCRBY", KEYS[6], "processed", processed)
end
if failed > 0 then
  try("bookkeeping", "INCRBY", KEYS[5], failed)
  try("bookkeeping", "HINCRBY", KEYS[6], "failed", failed)
end
if processed > 0 or failed > 0 then
  try("bookkeeping", "EXPIRE", KEYS[6], ARGV[5])
end

for i = 7, #KEYS do
  local raw = try("fetch", "LMOVE", KEYS[i], inprogress, "RIGHT", "LEFT")
  if raw then
    -- the payload is embedded as stored; one that is not a JSON object is never registered
    -- (the worker files it into dead without running it)
    if string.sub(raw, 1, 1) == "{" then
      try("bookkeeping", "HSET", workers, tid, ARGV[i] .. raw .. ',"run_at":' .. ARGV[6] .. "}")
    else
      try("bookkeeping", "HDEL", workers, tid)
    end
    return {removed, failures, KEYS[i], raw}
  end
end
try("bookkeeping", "HDEL", workers, tid)
return {removed, failures}
