-- Adds one batch of runs to the per job class metrics of a minute, ten minutes and an hour.
--
-- KEYS[1]  the minute's hash (field: job class, value: its tally)
-- KEYS[2]  the ten minutes' hash (same layout)
-- KEYS[3]  the hour's hash (same layout)
-- ARGV[1]  the minute and ten-minute hashes' TTL in seconds
-- ARGV[2]  the hour hash's TTL in seconds
-- ARGV[3]  the most classes one hash holds; runs of further classes go to ARGV[4]
-- ARGV[4]  the field those further classes share
-- ARGV[5..] pairs: job class, its tally in this batch
-- A tally is "executions failures total_us max_us" then "bucket count" pairs, space separated.
-- Returns the number of classes written (per hash)

local function parse(text)
  local numbers = {}
  if text then
    for word in string.gmatch(text, "%S+") do
      numbers[#numbers + 1] = tonumber(word) or 0
    end
  end
  return numbers
end

local function merged(old, new)
  local counts = {}
  local order = {}
  local function take(numbers)
    for at = 5, #numbers - 1, 2 do
      local bucket = numbers[at]
      if counts[bucket] == nil then
        counts[bucket] = 0
        order[#order + 1] = bucket
      end
      counts[bucket] = counts[bucket] + numbers[at + 1]
    end
  end
  take(old)
  take(new)
  table.sort(order)
  local parts = {
    string.format("%.0f", (old[1] or 0) + new[1]),
    string.format("%.0f", (old[2] or 0) + new[2]),
    string.format("%.0f", (old[3] or 0) + new[3]),
    string.format("%.0f", math.max(old[4] or 0, new[4])),
  }
  for _, bucket in ipairs(order) do
    parts[#parts + 1] = string.format("%.0f %.0f", bucket, counts[bucket])
  end
  return table.concat(parts, " ")
end

local most = tonumber(ARGV[3])
local written = 0
for at = 5, #ARGV - 1, 2 do
  local new = parse(ARGV[at + 1])
  if #new >= 4 then
    for key_at = 1, 3 do
      local key = KEYS[key_at]
      local class = ARGV[at]
      local old = redis.call('HGET', key, class)
      if not old and redis.call('HLEN', key) >= most then
        class = ARGV[4]
        old = redis.call('HGET', key, class)
      end
      redis.call('HSET', key, class, merged(parse(old), new))
    end
    written = written + 1
  end
end
redis.call('EXPIRE', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[1])
redis.call('EXPIRE', KEYS[3], ARGV[2])
return written
