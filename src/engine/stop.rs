//! Stop strings across token boundaries: text that could be the start of a stop
//! string is held back until it is known not to be one.

pub struct StopStrings {
    stops: Vec<String>,
    pending: String,
}

impl StopStrings {
    pub fn new(stops: &[String]) -> Self {
        StopStrings {
            stops: stops.iter().filter(|s| !s.is_empty()).cloned().collect(),
            pending: String::new(),
        }
    }

    /// Adds text; returns what can be emitted and whether a stop string was hit
    /// (the text before it is emitted, the rest dropped).
    pub fn push(&mut self, text: &str) -> (String, bool) {
        self.pending.push_str(text);
        let hit = self
            .stops
            .iter()
            .filter_map(|s| self.pending.find(s.as_str()))
            .min();
        if let Some(at) = hit {
            let out = self.pending[..at].to_string();
            self.pending.clear();
            return (out, true);
        }
        let hold = self.held_suffix();
        let out = self.pending[..self.pending.len() - hold].to_string();
        self.pending.drain(..self.pending.len() - hold);
        (out, false)
    }

    /// The rest, when generation ends for another reason.
    pub fn finish(&mut self, text: &str) -> String {
        self.pending.push_str(text);
        std::mem::take(&mut self.pending)
    }

    /// Length of the longest suffix of `pending` that is a proper prefix of a stop string.
    fn held_suffix(&self) -> usize {
        let p = &self.pending;
        (1..=p.len())
            .rev()
            .filter(|&n| p.is_char_boundary(p.len() - n))
            .find(|&n| {
                self.stops
                    .iter()
                    .any(|s| s.len() > n && s.starts_with(&p[p.len() - n..]))
            })
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_string_split_over_pieces_is_caught() {
        let mut s = StopStrings::new(&["\nUser:".to_string()]);
        assert_eq!(s.push("Hello"), ("Hello".into(), false));
        assert_eq!(s.push(" there\nUs"), (" there".into(), false));
        assert_eq!(s.push("er: hi"), ("".into(), true));
    }

    #[test]
    fn a_false_start_is_released() {
        let mut s = StopStrings::new(&["END".to_string()]);
        assert_eq!(s.push("EN"), ("".into(), false));
        assert_eq!(s.push("D"), ("".into(), true));
        let mut s = StopStrings::new(&["END".to_string()]);
        assert_eq!(s.push("EN"), ("".into(), false));
        assert_eq!(s.push("ds"), ("ENds".into(), false));
        assert_eq!(s.finish("é"), "é");
    }
}
