-- The history index: what lets the History tab sort and filter without reading every run.
-- A run is named by its ref, the first 16 hex digits of the SHA-1 of its stored entry.
--
-- KEYS[1] cogworker:history:all     the runs (members: entries, scores: finish times)
-- KEYS[2] ...:history:index:time    ref -> finish time (every indexed run)
-- KEYS[3] ...:history:index:duration <time><ref> -> duration in ms (read highest first,
--         equal ones come newest first)
-- KEYS[4] ...:history:index:rows    hash: ref -> the run's index values (to unindex it)
-- KEYS[5] ...:history:index:meta    hash: cursor (finish time the catch-up has read up to)
-- ARGV[1] prefix of the per-value sets (then <column>:<lowercased value>), scored by time
-- ARGV[2] prefix of the value registries (then <column>), every value of a column, score 0
-- ARGV[3] prefix of the sort sets (then <column>), members <value> NUL <tie> NUL <ref>
-- ARGV[4] the operation, then its arguments:
--   add <entry> <finish time> <cutoff> <max runs> <cap>   index one run, then trim
--       (runs older than cutoff, then the oldest beyond max runs; at most cap dropped)
--       returns {added 0|1, dropped}
--   sync <overlap s> <cap>    index runs of history:all the index lacks (at most cap ahead
--       of the cursor, and at most cap in the overlap behind it), drop refs older than its
--       oldest run (at most cap)
--       returns {added, dropped, behind 0|1}
--   fetch <ref>...            returns {finish time, entry, ...} of the refs still stored,
--       in order; a ref whose entry is gone is unindexed (the reply then has fewer pairs)
--   select <sort> <order key> <reverse 0|1> <offset> <limit> <n> then n sources: each
--       "set" <key> | "range" <key> <min> <max>   (min/max as ZRANGEBYSCORE takes them)
--       the refs in every source: their total, then that page sorted by <sort> (time,
--       duration, or a row field number for a text column; <order key> is the set in that
--       order): one source is read in that set's order when that costs less, else the
--       smallest source is read whole and sorted (equal values newest first)
--       returns {total, ref, ref, ...}

local BY, VALUES, SORTS = ARGV[1], ARGV[2], ARGV[3]
local EQUAL_COLUMNS = {'status', 'class', 'queue'} -- row fields 3 to 5
local SORT_COLUMNS = {'class', 'queue', 'jid', 'status', 'args', 'error'} -- fields 6 to 11
local SORT_BYTES = 100

local function text(value)
  local kind = type(value)
  if kind == 'string' then return value end
  if kind == 'number' then return tostring(value) end
  return ''
end

local function clean(value) return (string.gsub(value, '%z', '')) end

local function split(row)
  local fields, start = {}, 1
  while true do
    local at = string.find(row, '\0', start, true)
    if not at then
      fields[#fields + 1] = string.sub(row, start)
      return fields
    end
    fields[#fields + 1] = string.sub(row, start, at - 1)
    start = at + 1
  end
end

-- the tie part of a sort member: ascending order puts the newest run first
local function tie(score) return string.format('%017.4f', 1e11 - tonumber(score)) end
-- the same for the duration set, whose natural order is descending
local function time_tie(score) return string.format('%017.4f', tonumber(score)) end

local function duration_of(entry)
  local stored = entry['duration']
  if type(stored) == 'number' then return math.floor(stored + 0.5) end
  local started, finished = entry['started_at'], entry['finished_at']
  if type(started) == 'number' and type(finished) == 'number' then
    return math.floor((finished - started) * 1000 + 0.5)
  end
  return 0
end

local function row_of(member, score)
  local ok, entry = pcall(cjson.decode, member)
  if not ok or type(entry) ~= 'table' then entry = {} end
  local args = ''
  if entry['args'] ~= nil then
    local encoded, json = pcall(cjson.encode, entry['args'])
    if encoded then args = json end
  else
    args = '[]'
  end
  local error_text = ''
  if text(entry['error_class']) ~= '' then
    error_text = text(entry['error_class']) .. ': ' .. text(entry['error_message'])
  end
  local fields = {score, tostring(duration_of(entry))}
  for _, column in ipairs(EQUAL_COLUMNS) do
    fields[#fields + 1] = string.lower(clean(text(entry[column])))
  end
  local sorts = {text(entry['class']), text(entry['queue']), text(entry['jid']),
    text(entry['status']), args, error_text}
  for _, value in ipairs(sorts) do
    fields[#fields + 1] = string.sub(clean(value), 1, SORT_BYTES)
  end
  return fields
end

local function add(member, score)
  local ref = string.sub(redis.sha1hex(member), 1, 16)
  if redis.call('ZSCORE', KEYS[2], ref) then return 0 end
  local fields = row_of(member, score)
  redis.call('ZADD', KEYS[2], score, ref)
  redis.call('ZADD', KEYS[3], fields[2], time_tie(score) .. ref)
  for i, column in ipairs(EQUAL_COLUMNS) do
    redis.call('ZADD', BY .. column .. ':' .. fields[i + 2], score, ref)
    redis.call('ZADD', VALUES .. column, 0, fields[i + 2])
  end
  local suffix = '\0' .. tie(score) .. '\0' .. ref
  for i, column in ipairs(SORT_COLUMNS) do
    redis.call('ZADD', SORTS .. column, 0, fields[i + 5] .. suffix)
  end
  redis.call('HSET', KEYS[4], ref, table.concat(fields, '\0'))
  return 1
end

local function drop(ref)
  local row = redis.call('HGET', KEYS[4], ref)
  redis.call('ZREM', KEYS[2], ref)
  if not row then return 0 end
  local fields = split(row)
  redis.call('ZREM', KEYS[3], time_tie(fields[1]) .. ref)
  for i, column in ipairs(EQUAL_COLUMNS) do
    local key = BY .. column .. ':' .. fields[i + 2]
    redis.call('ZREM', key, ref)
    if redis.call('EXISTS', key) == 0 then redis.call('ZREM', VALUES .. column, fields[i + 2]) end
  end
  local suffix = '\0' .. tie(fields[1]) .. '\0' .. ref
  for i, column in ipairs(SORT_COLUMNS) do
    redis.call('ZREM', SORTS .. column, fields[i + 5] .. suffix)
  end
  redis.call('HDEL', KEYS[4], ref)
  return 1
end

local function drop_all(refs)
  local dropped = 0
  for _, ref in ipairs(refs) do dropped = dropped + drop(ref) end
  return dropped
end

local function trim(cutoff, max_runs, cap)
  local dropped = drop_all(redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', cutoff,
    'LIMIT', 0, cap))
  local excess = math.min(redis.call('ZCARD', KEYS[2]) - max_runs, cap - dropped)
  if excess > 0 then dropped = dropped + drop_all(redis.call('ZRANGE', KEYS[2], 0, excess - 1)) end
  return dropped
end

local function sync(overlap, cap)
  local cursor = redis.call('HGET', KEYS[5], 'cursor')
  local added, from = 0, '-inf'
  if cursor then
    -- the overlap behind the cursor again (runs stamped before it, stored after), then ahead
    local back = redis.call('ZRANGEBYSCORE', KEYS[1], tonumber(cursor) - overlap, cursor,
      'WITHSCORES', 'LIMIT', 0, cap)
    for i = 1, #back, 2 do added = added + add(back[i], back[i + 1]) end
    from = '(' .. cursor
  end
  local found = redis.call('ZRANGEBYSCORE', KEYS[1], from, '+inf', 'WITHSCORES', 'LIMIT', 0, cap)
  for i = 1, #found, 2 do added = added + add(found[i], found[i + 1]) end
  if #found > 0 then redis.call('HSET', KEYS[5], 'cursor', found[#found]) end
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  local stale
  if #oldest == 0 then
    stale = redis.call('ZRANGE', KEYS[2], 0, cap - 1)
    redis.call('HDEL', KEYS[5], 'cursor')
  else
    stale = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. oldest[2], 'LIMIT', 0, cap)
  end
  -- behind: the read ahead stopped at its cap, more runs wait for the next read
  return {added, drop_all(stale), #found == 2 * cap and 1 or 0}
end

local function fetch(refs)
  local found = {}
  for _, ref in ipairs(refs) do
    local score = redis.call('ZSCORE', KEYS[2], ref)
    local member = nil
    if score then
      for _, candidate in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], score, score)) do
        if string.sub(redis.sha1hex(candidate), 1, 16) == ref then member = candidate end
      end
    end
    if member then
      found[#found + 1] = score
      found[#found + 1] = member
    else
      drop(ref)
    end
  end
  return found
end

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

local op = ARGV[4]
if op == 'add' then
  local added = add(ARGV[5], ARGV[6])
  return {added, trim(ARGV[7], tonumber(ARGV[8]), tonumber(ARGV[9]))}
elseif op == 'sync' then
  return sync(tonumber(ARGV[5]), tonumber(ARGV[6]))
elseif op == 'fetch' then
  return fetch({unpack(ARGV, 5)})
elseif op == 'select' then
  local sources, at = {}, 11
  for _ = 1, tonumber(ARGV[10]) do
    if ARGV[at] == 'range' then
      sources[#sources + 1] = {key = ARGV[at + 1], min = ARGV[at + 2], max = ARGV[at + 3]}
      at = at + 4
    else
      sources[#sources + 1] = {key = ARGV[at + 1]}
      at = at + 2
    end
  end
  return select(ARGV[5], ARGV[6], ARGV[7] == '1', tonumber(ARGV[8]), tonumber(ARGV[9]), sources)
end
return redis.error_reply('history_index: unknown operation ' .. tostring(op))
