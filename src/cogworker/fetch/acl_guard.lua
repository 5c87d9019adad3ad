-- acl_denied(command, args...) -> an error reply if this user may not run the command, else nil
-- Redis stops a script at the first command ACL refuses, keeping the writes made before it: a
-- job pushed back onto its queue but still on the in-progress list would run twice. Scripts
-- whose later write ACL could refuse ask first and fail whole. (Redis < 7 can't tell: there
-- the script runs as before.)
local function acl_denied(command, ...)
  if redis.acl_check_cmd == nil then
    return nil
  end
  local ok, allowed = pcall(redis.acl_check_cmd, command, ...)
  if ok and not allowed then
    return redis.error_reply("NOPERM this user has no permissions to run the '" .. command ..
      "' command")
  end
  return nil
end
