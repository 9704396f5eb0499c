use std::collections::HashMap;
use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub sku: String,
    pub name: String,
    pub quantity: u32,
    pub price_cents: u64,
}

#[derive(Debug)]
pub enum InventoryError {
    UnknownSku(String),
    InsufficientStock { sku: String, wanted: u32, available: u32 },
}

impl fmt::Display for InventoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InventoryError::UnknownSku(sku) => write!(f, "unknown sku {}", sku),
            InventoryError::InsufficientStock { sku, wanted, available } => {
                write!(f, "sku {}: wanted {}, only {} in stock", sku, wanted, available)
            }
        }
    }
}

#[derive(Default)]
pub struct Inventory {
    items: HashMap<String, Item>,
}

impl Inventory {
    pub fn add(&mut self, item: Item) {
        self.items
            .entry(item.sku.clone())
            .and_modify(|existing| existing.quantity += item.quantity)
            .or_insert(item);
    }

    pub fn remove(&mut self, sku: &str, quantity: u32) -> Result<(), InventoryError> {
        let item = self
            .items
            .get_mut(sku)
            .ok_or_else(|| InventoryError::UnknownSku(sku.to_string()))?;
        if item.quantity < quantity {
            return Err(InventoryError::InsufficientStock {
                sku: sku.to_string(),
                wanted: quantity,
                available: item.quantity,
            });
        }
        item.quantity -= quantity;
        Ok(())
    }

    pub fn total_value_cents(&self) -> u64 {
        self.items
            .values()
            .map(|item| item.price_cents * item.quantity as u64)
            .sum()
    }
}
