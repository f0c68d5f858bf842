/**
 * A stand-in for libfaketime where it is not installed: preloaded with `node --require`, it moves
 * this process's wall clock (Date) by CLOCK_SKEW_MS. Timers and the monotonic clock are left alone,
 * as libfaketime's FAKETIME_DONT_FAKE_MONOTONIC=1 leaves them.
 */
'use strict';
const offset = Number(process.env.CLOCK_SKEW_MS || 0);
if (offset !== 0) {
  const RealDate = Date;
  class SkewedDate extends RealDate {
    constructor(...args) {
      if (args.length === 0) super(RealDate.now() + offset);
      else super(...args);
    }
    static now() {
      return RealDate.now() + offset;
    }
  }
  globalThis.Date = SkewedDate;
}
