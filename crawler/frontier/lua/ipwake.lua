-- Wake hosts parked for their IP address (ipend.lua said the address has
-- room): each goes back to the ready set, no earlier than the time given,
-- and may be claimed once without joining the address's waiting hosts again
-- (iwk, claim.lua).
--
-- A host refused at the address's gate joins its queue at once (ipgate.lua)
-- but is parked here only when its release arrives (release.lua "ipwait"), a
-- batch later; a DNS job's host joins the queue before its note (ipnote.lua).
-- A wake that comes in between finds the host not parked: it is kept as the
-- same mark (iwk), and the park that follows lets the host go instead of
-- leaving it to wait for its fallback time. (It still answers 0: the caller
-- hands the place on too, should the host have gone by its own time.)
--
-- KEYS[1]  the partition's counts hash (routes the call to the partition)
-- ARGV[1]  prefix
-- then one JSON object by name per wake (scriptargs.ipwake_item; as many as
-- there are: positional): address, host, at_ms (from when)
-- Returns, per wake, 1 if the host was parked and is woken, else 0.
local p = ARGV[1]
local out = {}
for i = 2, #ARGV do
  local wake = cjson.decode(ARGV[i])
  local addr, host, at = wake.address, wake.host, wake.at_ms
  local parked = p .. ':iw:' .. addr
  if redis.call('ZREM', parked, host) == 1 then
    redis.call('HSET', p .. ':h:' .. host, H.woken, 1)
    refresh_host(p, host)
    redis.call('ZADD', p .. ':ready', 'XX', 'GT', at, host)
    if redis.call('EXISTS', parked) == 0 then redis.call('ZREM', p .. ':iwake', addr) end
    out[#out + 1] = 1
  else
    if redis.call('EXISTS', p .. ':h:' .. host) == 1 then
      redis.call('HSET', p .. ':h:' .. host, H.woken, 1)
    end
    out[#out + 1] = 0
  end
end
wake_sleepers(p)  -- (common.lua: workers waiting for this partition)
return out
