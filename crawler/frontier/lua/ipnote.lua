-- The outcome of DNS jobs (claim.lua "D"): each host's site learns its server
-- address, and the host goes back to the ready set, or is parked for the
-- address when it joined the address's queue (ipjoin.lua).
--
-- KEYS[1]  the partition's counts hash (routes the call to the partition)
-- ARGV[1]  prefix
-- then one JSON object by name per host (scriptargs.ipnote_item; as many as
-- there are: positional): host; address ('-': none to gate: its requests go
-- through a proxy, or its name did not resolve and the download will say
-- why); known_ms, how long that holds; go, true if it may go now (a place is
-- reserved for it), false if it waits in the address's queue; wake_ms, how
-- long it waits at most before it is looked at again (a lost wake's fallback)
-- Returns how many hosts were parked.
local p = ARGV[1]
local now = now_ms()
local parked = 0
local SITE_READ = {S.hosts, S.in_flight, S.concurrency, S.next_claim, S.held, S.robots_job,
                   S.ctl_concurrency, S.ctl_paused, S.floor, S.delay, S.adaptive, S.first_answer,
                   S.next_start, S.budget_job}
for i = 2, #ARGV do
  local note = cjson.decode(ARGV[i])
  local host, addr, known_ms, go = note.host, note.address, note.known_ms, note.go == true
  local hk, sk = p .. ':h:' .. host, site_key(p, host)
  -- (every host record has n: none, the host is gone)
  local h = record(hk, {H.queued, H.robots_wait, H.woken})
  if h[H.queued] then
    -- The DNS job is over (dj 0: no wait of its own), the address known.
    local w = {[S.dns_job] = 0, [S.address] = addr, [S.address_until] = now + known_ms}
    hset_fields(sk, w)
    local g = record(sk, SITE_READ)
    if g[S.hosts] == '1' then  -- a site of one authority: placed from what is read here
      g[S.dns_job], g[S.address], g[S.address_until] = 0, addr, now + known_ms
      place_host(p, host, ready_at(h[H.queued], h[H.robots_wait], g))
    else
      refresh_site(p, host)
    end
    if go then
      redis.call('HSET', hk, H.woken, 1)  -- its place is reserved: no joining the parked
    elseif addr ~= '-' and not h[H.woken] then
      -- (a host marked iwk was woken before this note came: ipwake.lua)
      park_for_ip(p, host, addr, now + note.wake_ms)
      parked = parked + 1
    end
  end
end
wake_sleepers(p)  -- (common.lua: workers waiting for this partition)
return parked
