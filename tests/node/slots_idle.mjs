// slots_idle.mjs: after a client abort, wait (up to 5 s) until /slots shows every slot idle.
export async function slotsIdle(url) {
  for (let i = 0; i < 100; i++) {
    if ((await (await fetch(url + '/slots')).json()).every((s) => !s.is_processing)) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return false;
}
