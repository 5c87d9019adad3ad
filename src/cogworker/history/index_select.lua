--#include index_rows.lua
-- One page of the refs in every source, sorted: one source is read in the order set's order
-- when that costs less, else the smallest source is read whole, the others asked of each of
-- its refs, and sorted (equal values newest first).
-- KEYS[1..5] and ARGV[1..3]: as in index_rows.lua
-- ARGV[4] sort: time, duration, or the row field number of a text column
-- ARGV[5] the order key: the set in that order   ARGV[6] reverse 0|1
-- ARGV[7] offset   ARGV[8] limit   ARGV[9] n, the number of sources
-- ARGV[10..] n sources, each "set" <key> or "range" <key> <min> <max> (min/max as
--         ZRANGEBYSCORE takes them)
-- Returns {total, ref, ref, ...}

-- a source: a set of refs to test membership in, or a score range of a set
local function members(source)
  if source.min then
    return redis.call('ZRANGEBYSCORE', source.key, source.min, source.max)
  end
  return redis.call('ZRANGE', source.key, 0, -1)
end

local function size(source)
  if source.min then return redis.call('ZCOUNT', source.key, source.min, source.max) end
  return redis.call('ZCARD', source.key)
end

local function above(score, bound, lower)
  if bound == '-inf' then return lower end
  if bound == '+inf' then return not lower end
  local exclusive = string.sub(bound, 1, 1) == '('
  local limit = tonumber(exclusive and string.sub(bound, 2) or bound)
  if lower then return score > limit or (not exclusive and score == limit) end
  return score < limit or (not exclusive and score == limit)
end

-- the member naming a ref in a set: the duration set's carry the tie first
local function member_of(key, ref)
  if key ~= KEYS[3] then return ref end
  local time = redis.call('ZSCORE', KEYS[2], ref)
  if not time then return ref end -- not indexed: no member names it
  return time_tie(time) .. ref
end

local function holds(source, ref)
  local score = redis.call('ZSCORE', source.key, member_of(source.key, ref))
  if not score or not source.min then return score ~= false and score ~= nil end
  score = tonumber(score)
  return above(score, source.min, true) and above(score, source.max, false)
end

local function sort_value(sort, ref)
  if sort == 'time' then return tonumber(redis.call('ZSCORE', KEYS[2], ref)) end
  if sort == 'duration' then return tonumber(redis.call('ZSCORE', KEYS[3], member_of(KEYS[3], ref))) end
  local row = redis.call('HGET', KEYS[4], ref)
  return row and split(row)[tonumber(sort)] or ''
end

-- the page of one source's refs in another set's order: that set is read from the nearer
-- end, each ref asked of the source, until the page is full; nil once it has asked budget
-- refs (the source's refs lie further in that order than their share suggested)
local function walk(order_key, reverse, offset, limit, source, total, budget)
  local stop = math.min(offset + limit, total)
  local skip, take, backwards = offset, stop - offset, reverse
  local from_end = offset + stop > total
  if from_end then skip, backwards = total - stop, not reverse end
  local found, seen, start = {}, 0, 0
  while #found < take do
    local chunk
    if backwards then
      chunk = redis.call('ZREVRANGE', order_key, start, start + 499)
    else
      chunk = redis.call('ZRANGE', order_key, start, start + 499)
    end
    if #chunk == 0 then break end
    if start >= budget then return nil end
    for _, member in ipairs(chunk) do
      local ref = string.sub(member, -16)
      if holds(source, ref) then
        seen = seen + 1
        if seen > skip then
          found[#found + 1] = ref
          if #found >= take then break end
        end
      end
    end
    start = start + 500
  end
  if from_end then
    local flipped = {}
    for i = #found, 1, -1 do flipped[#flipped + 1] = found[i] end
    found = flipped
  end
  return found
end

-- every ref of the smallest source asked of the others, then sorted: the total and a page
local function gather(sort, reverse, offset, limit, sources, smallest)
  local matched = {}
  for _, member in ipairs(members(sources[smallest])) do
    local ref = string.sub(member, -16)
    local all = true
    for i, source in ipairs(sources) do
      if i ~= smallest and not holds(source, ref) then all = false break end
    end
    if all then
      local time = tonumber(redis.call('ZSCORE', KEYS[2], ref)) or 0
      local value = time
      if sort ~= 'time' then value = sort_value(sort, ref) or 0 end
      matched[#matched + 1] = {ref, value, time}
    end
  end
  table.sort(matched, function(a, b)
    if a[2] ~= b[2] then
      if reverse then return a[2] > b[2] end
      return a[2] < b[2]
    end
    if a[3] ~= b[3] then return a[3] > b[3] end
    return a[1] < b[1]
  end)
  local reply = {#matched}
  for i = offset + 1, math.min(offset + limit, #matched) do reply[#reply + 1] = matched[i][1] end
  return reply
end

local function select(sort, order_key, reverse, offset, limit, sources)
  local smallest, least = 1, math.huge
  for i, source in ipairs(sources) do
    local count = size(source)
    if count < least then smallest, least = i, count end
  end
  if #sources == 1 and least > 0 then
    -- walking the order costs about (offset + limit) * runs / matches lookups (from the
    -- nearer end), gathering about three per match
    local runs = redis.call('ZCARD', KEYS[2])
    local depth = math.min(offset, math.max(least - offset - limit, 0)) + limit
    if depth * runs / least < 3 * least then
      local found = walk(order_key, reverse, offset, limit, sources[1], least, 3 * least + 1000)
      if found then
        local reply = {least}
        for _, ref in ipairs(found) do reply[#reply + 1] = ref end
        return reply
      end
    end
  end
  return gather(sort, reverse, offset, limit, sources, smallest)
end

local sources, at = {}, 10
for _ = 1, tonumber(ARGV[9]) do
  if ARGV[at] == 'range' then
    sources[#sources + 1] = {key = ARGV[at + 1], min = ARGV[at + 2], max = ARGV[at + 3]}
    at = at + 4
  else
    sources[#sources + 1] = {key = ARGV[at + 1]}
    at = at + 2
  end
end
return select(ARGV[4], ARGV[5], ARGV[6] == '1', tonumber(ARGV[7]), tonumber(ARGV[8]), sources)
