-- Undo a won claim whose push failed, so the slot can run on the next tick. last_slot is
-- moved back only if it still holds this slot (never past a later slot somebody claimed);
-- with no previous slot it becomes slot - 1 rather than absent, so a priming process
-- (catch-up off) can't swallow the slot.
-- KEYS[1]  periodic:last_slot:<pjid>   KEYS[2]  periodic:lock:<pjid>:<slot>
-- KEYS[3]  periodic:running:<pjid>
-- ARGV[1]  slot
-- ARGV[2]  previous slot or ""
-- ARGV[3]  jid of the failed run
-- Returns  1
local ok, current = pcall(redis.call, "GET", KEYS[1])
if ok and current == ARGV[1] then
  if ARGV[2] ~= "" then
    redis.call("SET", KEYS[1], ARGV[2])
  else
    redis.call("SET", KEYS[1], tostring(tonumber(ARGV[1]) - 1))
  end
end
redis.call("DEL", KEYS[2])
local held, holder = pcall(redis.call, "GET", KEYS[3])
if held and holder == ARGV[3] then
  pcall(redis.call, "DEL", KEYS[3])
end
return 1
