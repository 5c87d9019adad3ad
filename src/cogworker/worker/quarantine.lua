-- Move a key that holds the wrong type out of the way, so the system can recreate it.
-- The type is checked again here: the caller's view may be stale.
-- KEYS[1]  the key                          KEYS[2]  its quarantine name
-- ARGV[1]  expected type
-- ARGV[2]  quarantine TTL in seconds
-- Returns  1 if moved, 0 if the key is absent or of the expected type.
local actual = redis.call("TYPE", KEYS[1])["ok"]
if actual == "none" or actual == ARGV[1] then
  return 0
end
redis.call("RENAME", KEYS[1], KEYS[2])
redis.call("EXPIRE", KEYS[2], ARGV[2])
return 1
