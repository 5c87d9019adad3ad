-- Send a command to a process: kept in its presence hash, for the process to take when it
-- subscribes again should the pub/sub message miss it, then published on its channel. Kept
-- only while the presence lives: a field written after it expired would make a presence
-- with no info. PUBLISH comes last: an error before it means nothing was sent.
-- KEYS[1]  cogworker:process:<identity>
-- ARGV[1]  its signal channel
-- ARGV[2]  the command
-- ARGV[3]  the presence field that keeps it
-- Returns  how many subscribers PUBLISH reached
if redis.call("EXISTS", KEYS[1]) == 1 then
  redis.call("HSET", KEYS[1], ARGV[3], ARGV[2])
end
return redis.call("PUBLISH", ARGV[1], ARGV[2])
