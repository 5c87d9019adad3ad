-- Acknowledge finished jobs: remove each from the in-progress list and forget its orphan count.
-- KEYS[1]       cogworker:inprogress:<identity>
-- KEYS[2..n]    cogworker:orphanings:<jid> of each job, in the order of ARGV
-- ARGV[1..n-1]  the raw jobs exactly as fetched
-- Returns       a list with, per job, 1 if it was removed and 0 if it was no longer listed.
local removed = {}
for i = 1, #ARGV do
  removed[i] = redis.call("LREM", KEYS[1], 1, ARGV[i])
  pcall(redis.call, "DEL", KEYS[i + 1])
end
return removed
