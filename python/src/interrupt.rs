//! Ctrl-C during a call, without a thread per call.
//!
//! A call runs on the calling thread with the GIL released, so Python
//! cannot run its SIGINT handler until the call returns. For the span of
//! a call on the main thread (the one Python runs signal handlers on),
//! [`SigintGuard`] puts a handler in front of the C handler SIGINT has
//! (Python's): it raises the call's [`Interrupt`], so the interpreter
//! stops at its next time check, then runs the handler that was there, so
//! Python sees the signal as it would have. Dropping the guard puts the
//! previous handler back; the caller then runs `check_signals`, which
//! raises KeyboardInterrupt. This is how solvers embedded in Python listen
//! for Ctrl-C during a solve; it costs two `sigaction` calls a call.
//!
//! Calls on other threads take no guard: Python runs signal handlers on
//! the main thread only. Nor does a call while SIGINT is ignored or has
//! its default action (Python does not watch it then). Elsewhere than
//! Unix no guard is taken.

use mpmd_core::interp::Interrupt;

/// Listens for SIGINT for as long as it lives.
pub(crate) struct SigintGuard {
    #[cfg(unix)]
    previous: Option<libc::sigaction>,
}

impl SigintGuard {
    /// The guard, and the interrupt a SIGINT raises while it lives.
    pub(crate) fn listen() -> (SigintGuard, Interrupt) {
        #[cfg(unix)]
        {
            unix::listen()
        }
        #[cfg(not(unix))]
        {
            (SigintGuard {}, Interrupt::new())
        }
    }
}

#[cfg(unix)]
impl Drop for SigintGuard {
    fn drop(&mut self) {
        if let Some(previous) = &self.previous {
            // SAFETY: puts back the action that was there before ours.
            unsafe { libc::sigaction(libc::SIGINT, previous, std::ptr::null_mut()) };
        }
    }
}

#[cfg(unix)]
mod unix {
    use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

    use mpmd_core::interp::Interrupt;

    use super::SigintGuard;

    /// The interrupt of the call in flight on the main thread. Each one
    /// stored here is leaked (one a Ctrl-C that reached a call): the
    /// handler may read it at any moment, so it is never freed.
    static CURRENT: AtomicPtr<Interrupt> = AtomicPtr::new(std::ptr::null_mut());
    /// The C handler that was installed before ours, and its flags.
    static PREVIOUS_HANDLER: AtomicUsize = AtomicUsize::new(0);
    static PREVIOUS_FLAGS: AtomicUsize = AtomicUsize::new(0);

    type InfoHandler = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);
    type PlainHandler = extern "C" fn(libc::c_int);

    /// Raises the call's interrupt, then runs the previous handler.
    /// Async-signal-safe: atomic loads and stores, and that handler.
    extern "C" fn on_sigint(
        signal: libc::c_int,
        info: *mut libc::siginfo_t,
        context: *mut libc::c_void,
    ) {
        // SAFETY: every pointer stored in CURRENT is leaked, never freed.
        if let Some(interrupt) = unsafe { CURRENT.load(Ordering::Acquire).as_ref() } {
            interrupt.raise();
        }
        let previous = PREVIOUS_HANDLER.load(Ordering::Acquire);
        if previous == libc::SIG_DFL || previous == libc::SIG_IGN {
            return;
        }
        let flags = PREVIOUS_FLAGS.load(Ordering::Acquire) as libc::c_int;
        // SAFETY: `previous` is the C handler SIGINT had, called the way
        // its flags say it expects.
        unsafe {
            if flags & libc::SA_SIGINFO != 0 {
                std::mem::transmute::<usize, InfoHandler>(previous)(signal, info, context);
            } else {
                std::mem::transmute::<usize, PlainHandler>(previous)(signal);
            }
        }
    }

    /// Whether this is the process's main thread (asked once a thread).
    fn on_main_thread() -> bool {
        thread_local! {
            static MAIN: bool = {
                #[cfg(target_os = "linux")]
                // SAFETY: plain queries of this process and thread.
                let main = unsafe { libc::getpid() == libc::gettid() };
                #[cfg(target_vendor = "apple")]
                // SAFETY: a plain query of this thread.
                let main = unsafe { libc::pthread_main_np() } != 0;
                #[cfg(not(any(target_os = "linux", target_vendor = "apple")))]
                let main = false;
                main
            };
        }
        MAIN.with(|main| *main)
    }

    /// The main thread's interrupt for the next call: the last one, unless
    /// a signal raised it.
    fn main_interrupt() -> &'static Interrupt {
        // SAFETY: leaked, never freed.
        match unsafe { CURRENT.load(Ordering::Acquire).as_ref() } {
            Some(interrupt) if !interrupt.is_raised() => interrupt,
            _ => {
                let fresh: &'static Interrupt = Box::leak(Box::new(Interrupt::new()));
                CURRENT.store(std::ptr::from_ref(fresh).cast_mut(), Ordering::Release);
                fresh
            }
        }
    }

    pub(super) fn listen() -> (SigintGuard, Interrupt) {
        let none = SigintGuard { previous: None };
        if !on_main_thread() {
            return (none, Interrupt::new());
        }
        let interrupt = main_interrupt().clone();
        // SAFETY: sigaction on zeroed structs filled in as its manual says.
        unsafe {
            let mut ours: libc::sigaction = std::mem::zeroed();
            ours.sa_sigaction = on_sigint as InfoHandler as usize;
            ours.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut ours.sa_mask);
            // Ours runs the previous handler, so that is read and stored
            // before ours goes in.
            let mut previous: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGINT, std::ptr::null(), &mut previous) != 0 {
                return (none, interrupt);
            }
            let watched = previous.sa_sigaction != libc::SIG_DFL
                && previous.sa_sigaction != libc::SIG_IGN
                && previous.sa_sigaction != on_sigint as InfoHandler as usize;
            if !watched {
                return (none, interrupt);
            }
            PREVIOUS_HANDLER.store(previous.sa_sigaction, Ordering::Release);
            PREVIOUS_FLAGS.store(previous.sa_flags as usize, Ordering::Release);
            if libc::sigaction(libc::SIGINT, &ours, std::ptr::null_mut()) != 0 {
                return (none, interrupt);
            }
            (
                SigintGuard {
                    previous: Some(previous),
                },
                interrupt,
            )
        }
    }
}
