-- The outcome of DNS jobs (claim.lua "D"): each host's site learns its server
-- address, and the host goes back to the ready set, or is parked for the
-- address when it joined the address's queue (ipjoin.lua).
--
-- KEYS[1]  the partition's counts hash (routes the call to the partition)
-- ARGV[1]  prefix, then per host five values: host; address ('-': none to
--          gate: its requests go through a proxy, or its name did not
--          resolve and the download will say why); how long (ms) that holds;
--          '1' if it may go now (a place is reserved for it), '0' if it waits
--          in the address's queue; how long (ms) it waits at most before it is
--          looked at again (a lost wake's fallback)
-- Returns how many hosts were parked.
local p = ARGV[1]
local now = now_ms()
local parked = 0
local SITE_READ = {'na', 'i', 'c', 't', 'w', 'rj', 'xc', 'xp', 'fl', 'dl', 'ad', 's', 'bj'}
for i = 2, #ARGV, 5 do
  local host, addr, known_ms, go = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3]
  local hk, sk = p .. ':h:' .. host, site_key(p, host)
  -- (every host record has n: none, the host is gone)
  local h = record(hk, {'n', 'rw', 'iwk'})
  if h.n then
    -- The DNS job is over (dj 0: no wait of its own), the address known.
    local w = {dj = 0, ip = addr, ipx = now + known_ms}
    hset_fields(sk, w)
    local g = record(sk, SITE_READ)
    if g.na == '1' then  -- a site of one authority: placed from what is read here
      g.dj, g.ip, g.ipx = 0, addr, now + known_ms
      place_host(p, host, ready_at(h.n, h.rw, g))
    else
      refresh_site(p, host)
    end
    if go == '1' then
      redis.call('HSET', hk, 'iwk', 1)  -- its place is reserved: no joining the parked
    elseif addr ~= '-' and not h.iwk then
      -- (a host marked iwk was woken before this note came: ipwake.lua)
      park_for_ip(p, host, addr, now + tonumber(ARGV[i + 4]))
      parked = parked + 1
    end
  end
end
wake_sleepers(p)  -- (common.lua: workers waiting for this partition)
return parked
