-- Count how many of the newest entries of a job set belong to one queue, without sending
-- them back: the Overview's per-queue Retrying and Dead figures.
-- KEYS[1]  the set (cogworker:retry or cogworker:dead)
-- ARGV[1]  the queue name
-- ARGV[2]  the key-and-value text a compact job holds for that queue: "queue":"<name>"
-- ARGV[3]  how many entries to read at most, highest score first
-- Returns  {count, entries read, entries in the set}
--
-- An entry with exactly one "queue": key, followed at once by a string, is judged by that
-- text (a compact job's own queue); any other entry is decoded to read its top-level queue.
-- A job that has no queue of its own but one nested in its arguments would be counted: such
-- a job can't be retried anyway, and retry all leaves it alone.
local marker = '"queue":'
local needle = ARGV[2]
local members = redis.call("ZREVRANGE", KEYS[1], 0, tonumber(ARGV[3]) - 1)
local count = 0
for _, member in ipairs(members) do
  local first = string.find(member, marker, 1, true)
  local second = first and string.find(member, marker, first + #marker, true)
  local compact = first and string.sub(member, first + #marker, first + #marker) == '"'
  if compact and not second then
    if string.sub(member, first, first + #needle - 1) == needle then
      local after = string.sub(member, first + #needle, first + #needle)
      if after == "," or after == "}" then
        count = count + 1
      end
    end
  elseif string.find(member, '"queue"', 1, true) then
    local ok, job = pcall(cjson.decode, member)
    if ok and type(job) == "table" and job["queue"] == ARGV[1] then
      count = count + 1
    end
  end
end
return {count, #members, redis.call("ZCARD", KEYS[1])}
