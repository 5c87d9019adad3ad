-- Take up to ARGV[1] jobs for this process, moving each atomically from the tail of a queue to
-- the head of the process's in-progress list (so a job is never only in memory).
-- KEYS[1..n-1]  queue keys in the order to try (already weighted-shuffled, no repeats)
-- KEYS[n]       cogworker:inprogress:<identity>
-- ARGV[1]       how many jobs at most (the number of idle processor threads)
-- Returns       a flat list {queue_key, raw, queue_key, raw, ...}, empty when nothing waits.
local inprogress = KEYS[#KEYS]
local wanted = tonumber(ARGV[1])
local taken = {}
local count = 0
for i = 1, #KEYS - 1 do
  while count < wanted do
    local raw = redis.call("LMOVE", KEYS[i], inprogress, "RIGHT", "LEFT")
    if not raw then
      break
    end
    count = count + 1
    taken[#taken + 1] = KEYS[i]
    taken[#taken + 1] = raw
  end
  if count >= wanted then
    break
  end
end
return taken
