//! How many of a controller's pods must be ready: a plain value type, parsed from Armada's
//! `min_ready` by the loader and given to the apply engine as data (the engine knows no CRD).

/// A `min_ready` that is no pod count or percentage.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum MinReadyError {
    #[error("`min_ready` must not be negative, not {0}")]
    Negative(i64),
    #[error("`min_ready` `{0}` must be a percentage between 0% and 100%")]
    PercentOutOfRange(String),
    #[error("`min_ready` `{0}` must be an integer or a percentage such as \"80%\"")]
    NotANumber(String),
}

/// A parsed `min_ready`: how many of a controller's pods must be ready, a count or a percentage
/// of the desired pods (rounded up). The default is 100%. The one parsed form, for the loader's
/// check and the engine's readiness rules alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Threshold {
    Count(u64),
    Percent(u32),
}

impl Default for Threshold {
    fn default() -> Self {
        Threshold::Percent(100)
    }
}

impl std::str::FromStr for Threshold {
    type Err = MinReadyError;

    /// `"3"` or `"80%"`.
    fn from_str(s: &str) -> Result<Threshold, MinReadyError> {
        match s.strip_suffix('%') {
            Some(p) => match p.parse::<u32>() {
                Ok(p) if p <= 100 => Ok(Threshold::Percent(p)),
                _ => Err(MinReadyError::PercentOutOfRange(s.to_string())),
            },
            None => s
                .parse::<u64>()
                .map(Threshold::Count)
                .map_err(|_| MinReadyError::NotANumber(s.to_string())),
        }
    }
}

impl Threshold {
    /// Pods that must be ready out of `desired`: a percentage is rounded up.
    pub fn required(self, desired: u64) -> u64 {
        match self {
            Threshold::Count(n) => n,
            Threshold::Percent(p) => (desired * u64::from(p)).div_ceil(100),
        }
    }
}
