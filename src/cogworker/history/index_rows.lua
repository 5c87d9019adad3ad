-- The history index's rows, shared by its four scripts (index_add, index_sync, index_fetch,
-- index_select): what lets the History tab sort and filter without reading every run. A run
-- is named by its ref, the first 16 hex digits of the SHA-1 of its stored entry; indexing
-- one (add) writes its ref into every set below, unindexing it (drop) takes it out of them.
-- Every script that includes this one takes the same keys and first three arguments:
-- KEYS[1] cogworker:history:all     the runs (members: entries, scores: finish times)
-- KEYS[2] ...:history:index:time    ref -> finish time (every indexed run)
-- KEYS[3] ...:history:index:duration <time><ref> -> duration in ms (read highest first,
--         equal ones come newest first)
-- KEYS[4] ...:history:index:rows    hash: ref -> the run's index values (to unindex it)
-- KEYS[5] ...:history:index:meta    hash: cursor (finish time the catch-up has read up to)
-- ARGV[1] prefix of the per-value sets (then <column>:<lowercased value>), scored by time
-- ARGV[2] prefix of the value registries (then <column>), every value of a column, score 0
-- ARGV[3] prefix of the sort sets (then <column>), members <value> NUL <tie> NUL <ref>

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
