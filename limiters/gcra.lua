-- GCRA: one request every ARGV[1] microseconds, ARGV[2] more at once.
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local tolerance = burst * interval
local nexttat = tat + interval
local allow_at = nexttat - tolerance - interval
if now < allow_at then
  return {0, 0, tat - now, allow_at - now}
end
redis.call('SET', KEYS[1], nexttat, 'PX', math.floor((nexttat - now) / 1000) + 1000)
return {1, math.floor((tolerance + interval - (nexttat - now)) / interval), nexttat - now, 0}
