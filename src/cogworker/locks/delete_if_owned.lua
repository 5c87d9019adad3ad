-- Release locks only while each still belongs to the job named beside it, so releasing an
-- older job's lock never deletes a newer job's. One pair or many (a batch from a clear). A key
-- holding another type is nobody's lock: it is skipped and named, so it can't abort a batch.
-- KEYS[i]  a lock (cogworker:unique:<digest> or periodic:running:<pjid>)
-- ARGV[i]  the jid that must own KEYS[i] for it to be deleted
-- Returns  {how many locks were deleted, each key that holds another type...}
local reply = {0}
for i = 1, #KEYS do
  local owner = redis.pcall("GET", KEYS[i])
  if type(owner) == "table" and owner.err then
    reply[#reply + 1] = KEYS[i]
  elseif owner == ARGV[i] then
    reply[1] = reply[1] + redis.call("DEL", KEYS[i])
  end
end
return reply
