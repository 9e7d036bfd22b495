-- End queued URLs of one host that a change of the crawl's scope put out of
-- it (crawler/frontier/scopeend.py): each becomes a dead letter, requeue-able
-- with `scrapy frontier requeue --reason out-of-scope`. (common.lua is
-- prepended: refresh_host, hincr.)
--
-- The client reads the queue and decides; this call moves the entries it
-- names that are still queued (one claimed or ended meanwhile is skipped),
-- so it is atomic and may be repeated.
--
-- KEYS[1]  the partition's counts hash
-- ARGV[1]  prefix
-- ARGV[2]  the rest, a JSON object by name (scriptargs.scope_end_args): host,
--          the host key; reason, the dead reason (JSON text)
-- then the queue entries to end (16-byte fingerprint .. record: binary, as
-- many as there are: positional)
-- Returns how many ended.
local p, a = ARGV[1], cjson.decode(ARGV[2])
local host, reason = a.host, a.reason
local qk = p .. ':q:' .. host
local ended = 0
for i = 3, #ARGV do
  local entry = ARGV[i]
  if redis.call('ZREM', qk, entry) == 1 then
    redis.call('HDEL', p .. ':qm:' .. host, string.sub(entry, 1, 16))  -- (admit.lua's inlinks)
    dead_letter(KEYS[1], p, string.sub(entry, 1, 16), host, reason, entry)
    ended = ended + 1
  end
end
if ended > 0 then
  redis.call('HSET', p .. ':h:' .. host, H.queued, redis.call('ZCARD', qk))
  refresh_host(p, host)
  hincr(KEYS[1], N.queued, -ended)
  hincr(KEYS[1], N.dead, ended)
end
wake_sleepers(p)  -- (common.lua: workers waiting for this partition)
return ended
