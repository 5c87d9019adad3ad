-- acl_denied(command, args...) -> an error reply if this user may not run the command, else nil
-- Redis stops a script at the first command ACL refuses, keeping the writes made before it: a
-- job pushed back onto its queue but still on the in-progress list would run twice. Scripts
-- whose later write ACL could refuse ask first and fail whole. Redis >= 7 answers the question
-- (redis.acl_check_cmd); older servers can only be asked by trying: an LREM of a value no list
-- holds removes nothing, so "lrem" is probed that way there (other commands aren't).
local function acl_denied(command, ...)
  local refused = false
  if redis.acl_check_cmd ~= nil then
    local ok, allowed = pcall(redis.acl_check_cmd, command, ...)
    refused = ok and not allowed
  elseif command == "lrem" then
    local key = ...
    local ok, reply = pcall(redis.call, "LREM", key, 1, "\0cogworker:acl-probe")
    local message = not ok and tostring(type(reply) == "table" and reply.err or reply) or ""
    -- Redis 6.2 words it "The user executing the script can't run this command ..."
    refused = string.find(message, "NOPERM", 1, true) ~= nil
      or string.find(message, "can't run this command", 1, true) ~= nil
  end
  if refused then
    return redis.error_reply("NOPERM this user has no permissions to run the '" .. command ..
      "' command")
  end
  return nil
end
